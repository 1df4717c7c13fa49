"""Seeded, stratified splitting of sample indices into train / calibration / validation / test."""

from __future__ import annotations

import math

import numpy as np
from sklearn.model_selection import train_test_split

from quantgate.config import DataConfig
from quantgate.samples.errors import DataError
from quantgate.stages.data.validation_size import validation_lines, validation_share

SPLIT_NAMES = ("train", "calibration", "validation", "test")


def stratified(indices: np.ndarray, labels: np.ndarray, share: float, seed: int, held_out: str):
    """Seeded stratified split of `indices` into (rest, held_out share).

    Raises:
        DataError: the split cannot hold every class (too few images per class).
    """
    classes = len(set(labels[indices].tolist()))
    held = math.ceil(share * len(indices))
    if held < classes:
        raise DataError(
            f"the {held_out} split would hold {held} images but there are {classes} classes, so some class would "
            f"have no {held_out} image; add images or raise data.{held_out}_fraction"
        )
    try:
        return train_test_split(indices, test_size=share, stratify=labels[indices], random_state=seed)
    except ValueError as exc:  # e.g. a class with a single image cannot be stratified
        raise DataError(
            f"cannot split off the {held_out} split by class: {exc}; give every class at least 2 images per split"
        ) from exc


def split_indices(labels: np.ndarray, config: DataConfig) -> dict[str, np.ndarray]:
    """Stratified, seeded split of sample indices; the same config always gives the same split."""
    everything = np.arange(len(labels))
    rest, test = stratified(everything, labels, config.test_fraction, config.seed, "test")
    calibration_share = config.calibration_fraction / (1.0 - config.test_fraction)
    train, calibration = stratified(rest, labels, calibration_share, config.seed, "calibration")
    train, validation = split_validation(train, labels, config)
    return {"train": np.sort(train), "calibration": np.sort(calibration), "validation": np.sort(validation),
            "test": np.sort(test)}


def split_validation(train: np.ndarray, labels: np.ndarray, config: DataConfig) -> tuple[np.ndarray, np.ndarray]:
    """Take the validation split out of the training split (after test and calibration, which stay as they were)."""
    if config.validation_fraction == 0:
        return train, np.array([], dtype=train.dtype)
    total = len(labels) if config.test_path is None else len(train) / (1 - config.calibration_fraction)
    share = config.validation_fraction * total / len(train)
    if share >= 1:
        raise DataError(f"data.validation_fraction={config.validation_fraction} leaves no training images; lower it")
    return stratified(train, labels, share, config.seed, "validation")


def split_with_test_folder(labels: np.ndarray, test_count: int, config: DataConfig) -> dict[str, np.ndarray]:
    """Indices when the test split is a folder of its own: its `test_count` samples come after `labels`'s."""
    everything = np.arange(len(labels))
    train, calibration = stratified(everything, labels, config.calibration_fraction, config.seed, "calibration")
    train, validation = split_validation(train, labels, config)
    return {"train": np.sort(train), "calibration": np.sort(calibration), "validation": np.sort(validation),
            "test": np.arange(test_count) + len(labels)}


def split_by_class_without_training(labels: np.ndarray, config: DataConfig, test_count: int = 0) -> dict[str, np.ndarray]:
    """Stratified calibration / validation / test indices when nothing trains (a model trained elsewhere): the
    test split (or the `test_count` samples of a test folder, numbered after `labels`'s), validation, and the
    rest calibrates; train stays empty."""
    everything = np.arange(len(labels))
    if test_count:
        rest, test = everything, np.arange(test_count) + len(labels)
    else:
        rest, test = stratified(everything, labels, config.test_fraction, config.seed, "test")
    if config.validation_fraction:
        share = config.validation_fraction * (len(labels) + test_count) / len(rest)
        if share >= 1:
            raise DataError(f"data.validation_fraction={config.validation_fraction} leaves no calibration images; "
                            "lower it")
        calibration, validation = stratified(rest, labels, share, config.seed, "validation")
    else:
        calibration, validation = rest, np.array([], dtype=rest.dtype)
    return {"train": np.zeros(0, np.int64), "calibration": np.sort(calibration), "validation": np.sort(validation),
            "test": np.sort(test)}


def check_every_class(labels: np.ndarray, indices: dict[str, np.ndarray], num_classes: int,
                      config: DataConfig) -> None:
    """Raises DataError when a split (other than an empty validation split) misses a class."""
    for name in SPLIT_NAMES:
        if name == "validation" and config.validation_fraction == 0:
            continue
        missing = sorted(set(range(num_classes)) - set(labels[indices[name]].tolist()))
        if missing:
            raise DataError(f"the {name} split has no samples of classes {missing}; raise data.{name}_fraction")


def _held(size: int, share: float) -> int:
    """How many of `size` samples a `share` takes: at least one when `share` > 0."""
    return min(size, max(1, math.ceil(share * size))) if share > 0 else 0


def _take(indices: np.ndarray, share: float, seed: int, held: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of `indices` into (rest, a `share` of them, or `held` of them when given)."""
    held = _held(len(indices), share) if held is None else held
    order = np.random.default_rng(seed).permutation(len(indices))
    return indices[order[held:]], indices[order[:held]]


def _split_without_training(count: int, config: DataConfig, test_count: int) -> dict[str, np.ndarray]:
    """calibration / validation / test of `count` (+ `test_count`) samples when nothing trains."""
    everything = np.arange(count)
    if test_count:
        rest, test = everything, np.arange(test_count) + count
    else:
        rest, test = _take(everything, config.test_fraction, config.seed)
    share = min(validation_share(config) * (count + test_count) / max(len(rest), 1), 1.0)
    held = validation_lines(len(rest), _held(len(rest), share), config, training=False)
    calibration, validation = _take(rest, share, config.seed + 2, held)
    indices = {"train": np.zeros(0, np.int64), "calibration": calibration, "validation": validation, "test": test}
    for name in ("calibration", "test"):
        if not len(indices[name]):
            raise DataError(f"the {name} split of {count + test_count} samples would be empty; add samples or "
                            f"lower data.validation_fraction / data.test_fraction")
    return {name: np.sort(indices[name]) for name in SPLIT_NAMES}


def split_rule(config: DataConfig, training: bool, separate_test: bool) -> str:
    """In words, how the data was split into train / calibration / validation / test (for the data record)."""
    validation = f"validation {validation_share(config):.0%} of all samples"
    if config.validation_by_lines:
        validation += f" or at least {config.min_validation_lines} lines when the data allow (validation_rule)"
    if training:
        test = "test: the separate test file/folder" if separate_test else f"test {config.test_fraction:.0%}"
        return (f"{test}, calibration {config.calibration_fraction:.0%}, {validation} (taken from training), "
                "train: the rest")
    test = "test: the separate test file/folder" if separate_test else f"test {config.test_fraction:.0%}"
    return (f"nothing is trained (trained_model): {test}, {validation}, calibration: the rest; "
            "train: none (data.calibration_fraction does not apply)")


def plain_split(count: int, config: DataConfig, test_count: int = 0, training: bool = True) -> dict[str, np.ndarray]:
    """Seeded split of `count` samples that have no classes (text lines); when `test_count` > 0 the test split
    is those samples, numbered after the `count` others, and only calibration and validation are taken here.
    The shares are those of `split_indices`: validation is a share of all samples, taken from training.

    Without `training` (a model trained elsewhere) the train split stays empty: what is not test or validation
    calibrates.

    Raises:
        DataError: a split (other than validation with validation_fraction 0) would be empty.
    """
    if not training:
        return _split_without_training(count, config, test_count)
    everything = np.arange(count)
    if test_count:
        test = np.arange(test_count) + count
        train, calibration = _take(everything, config.calibration_fraction, config.seed)
    else:
        rest, test = _take(everything, config.test_fraction, config.seed)
        train, calibration = _take(rest, config.calibration_fraction / (1.0 - config.test_fraction), config.seed + 1)
    share = min(validation_share(config) * count / max(len(train), 1), 1.0)
    held = validation_lines(len(train), _held(len(train), share), config, training=True)
    train, validation = _take(train, share, config.seed + 2, held)
    indices = {"train": train, "calibration": calibration, "validation": validation, "test": test}
    for name in SPLIT_NAMES:
        if not len(indices[name]) and not (name == "validation" and config.validation_fraction == 0):
            fix = "lower data.calibration_fraction, validation_fraction or test_fraction" if name == "train" \
                else f"raise data.{name}_fraction"
            raise DataError(f"the {name} split of {count + test_count} samples would be empty; add samples or {fix}")
    return {name: np.sort(indices[name]) for name in SPLIT_NAMES}
