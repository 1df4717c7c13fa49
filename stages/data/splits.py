"""Data stage: load the built-in digits or an image-classification folder and split it, deterministically,
into train / calibration / validation / test.

The validation split is for choices made after training (the INT8 recipe search); the test split
stays untouched until the gate reads it."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from quantgate.config import DataConfig
from quantgate.stages.data.errors import DataError
from quantgate.stages.data.image_folders import load_image_folder, preprocessing_record
from quantgate.stages.data.outputs import FILES_FILE, SPLITS_FILE

SPLIT_NAMES = ("train", "calibration", "validation", "test")


@dataclass(frozen=True)
class Splits:
    """Images as float32 NCHW in [0, 1] and int64 labels, per split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_calibration: np.ndarray
    y_calibration: np.ndarray
    x_validation: np.ndarray  # empty when data.validation_fraction is 0
    y_validation: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_calibration.max(), self.y_test.max())) + 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample (C, H, W)."""
        return tuple(self.x_train.shape[1:])


@dataclass(frozen=True)
class DataResult:
    splits_file: str
    metrics: dict


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 real 8x8 handwritten digits, shipped with the package (no download)."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    return images, digits.target.astype(np.int64)


DATASETS = {"digits": _load_digits}


def _stratified(indices: np.ndarray, labels: np.ndarray, share: float, seed: int, held_out: str):
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
    rest, test = _stratified(everything, labels, config.test_fraction, config.seed, "test")
    calibration_share = config.calibration_fraction / (1.0 - config.test_fraction)
    train, calibration = _stratified(rest, labels, calibration_share, config.seed, "calibration")
    train, validation = _split_validation(train, labels, config)
    return {"train": np.sort(train), "calibration": np.sort(calibration), "validation": np.sort(validation),
            "test": np.sort(test)}


def _split_validation(train: np.ndarray, labels: np.ndarray, config: DataConfig) -> tuple[np.ndarray, np.ndarray]:
    """Take the validation split out of the training split (after test and calibration, which stay as they were)."""
    if config.validation_fraction == 0:
        return train, np.array([], dtype=train.dtype)
    total = len(labels) if config.test_path is None else len(train) / (1 - config.calibration_fraction)
    share = config.validation_fraction * total / len(train)
    if share >= 1:
        raise DataError(f"data.validation_fraction={config.validation_fraction} leaves no training images; lower it")
    return _stratified(train, labels, share, config.seed, "validation")


def fingerprint(dataset: str, images: np.ndarray, labels: np.ndarray, indices: dict[str, np.ndarray]) -> str:
    """sha256 over the dataset name, the arrays (dtype, shape and bytes) and the split indices."""
    digest = hashlib.sha256(dataset.encode())
    for array in (images, labels, *(indices[name] for name in SPLIT_NAMES)):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def _load_folders(config: DataConfig):
    """Images, labels and split indices of the configured folder(s), and what describes them.

    Raises:
        DataError: a folder, class or image is unusable, or a split cannot hold every class.
    """
    train_folder = load_image_folder(Path(config.path), config.transforms)
    describe = {
        "classes": list(train_folder.classes),
        "path": str(Path(config.path).expanduser().resolve()),
        "files": len(train_folder.files),
        "content_sha256": train_folder.content_sha256,
    }
    files = [f"{describe['path']}/{name}" for name in train_folder.files]
    if config.test_path is None:
        return train_folder.images, train_folder.labels, split_indices(train_folder.labels, config), describe, files
    test_folder = load_image_folder(Path(config.test_path), config.transforms)
    if test_folder.classes != train_folder.classes:
        raise DataError(
            f"the test folder's classes {list(test_folder.classes)} differ from the training folder's "
            f"{list(train_folder.classes)}; give both folders the same class sub-folders"
        )
    if test_folder.images.shape[1:] != train_folder.images.shape[1:]:
        raise DataError(f"test images are {test_folder.images.shape[1:]} after pre-processing, training images "
                        f"{train_folder.images.shape[1:]}; set data.transforms.resize / center_crop")
    everything = np.arange(len(train_folder.labels))
    train, calibration = _stratified(everything, train_folder.labels, config.calibration_fraction, config.seed,
                                     "calibration")
    train, validation = _split_validation(train, train_folder.labels, config)
    test = np.arange(len(test_folder.labels)) + len(train_folder.labels)
    images = np.concatenate([train_folder.images, test_folder.images])
    labels = np.concatenate([train_folder.labels, test_folder.labels])
    describe.update(test_path=str(Path(config.test_path).expanduser().resolve()), test_files=len(test_folder.files),
                    test_content_sha256=test_folder.content_sha256)
    files += [f"{describe['test_path']}/{name}" for name in test_folder.files]
    indices = {"train": np.sort(train), "calibration": np.sort(calibration), "validation": np.sort(validation),
               "test": test}
    return images, labels, indices, describe, files


def _write_file_index(path: Path, files: list[str], labels: np.ndarray, indices: dict[str, np.ndarray],
                      classes: list[str]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["split", "row", "file", "label", "class"])
        for name in SPLIT_NAMES:
            for row, index in enumerate(indices[name]):
                writer.writerow([name, row, files[index], int(labels[index]), classes[labels[index]]])


def prepare_data(config: DataConfig, out_dir: Path) -> DataResult:
    """Load `config.dataset`, split it and write the splits to `out_dir/splits.npz`.

    Raises:
        DataError: the dataset is unknown; a folder, class or image is unusable; or a split would miss a class.
    """
    source: dict = {}
    if config.dataset == "image_folder":
        images, labels, indices, source, files = _load_folders(config)
        _write_file_index(Path(out_dir) / FILES_FILE, files, labels, indices, source["classes"])
        num_classes = len(source["classes"])
    elif config.dataset in DATASETS:
        images, labels = DATASETS[config.dataset]()
        indices = split_indices(labels, config)
        num_classes = int(labels.max()) + 1
    else:
        raise DataError(f"unknown dataset {config.dataset!r}; built-in datasets are {sorted(DATASETS)}")
    for name in SPLIT_NAMES:
        if name == "validation" and config.validation_fraction == 0:
            continue
        missing = sorted(set(range(num_classes)) - set(labels[indices[name]].tolist()))
        if missing:
            raise DataError(f"the {name} split has no samples of classes {missing}; raise data.{name}_fraction")
    arrays = {}
    for name in SPLIT_NAMES:
        arrays[f"x_{name}"] = images[indices[name]]
        arrays[f"y_{name}"] = labels[indices[name]]
        arrays[f"index_{name}"] = indices[name]
    np.savez(Path(out_dir) / SPLITS_FILE, **arrays)
    # The folder's file list and bytes and the transforms are part of the identity, not only the decoded arrays.
    # Where the folder lies is not: the same files elsewhere are the same dataset.
    content = {key: value for key, value in source.items() if key not in ("path", "test_path")}
    identity = json.dumps({"dataset": config.dataset, **content, "transforms": config.transforms.model_dump(mode="json")},
                          sort_keys=True) if source else config.dataset
    metrics = {
        "dataset": config.dataset,
        "fingerprint_sha256": fingerprint(identity, images, labels, indices),
        "num_classes": num_classes,
        "input_shape": list(images.shape[1:]),
        **{f"samples_{name}": int(len(indices[name])) for name in SPLIT_NAMES},
    }
    if source:
        metrics["source"] = source
        metrics["preprocessing"] = preprocessing_record(config.transforms, images.shape[1:])
    return DataResult(splits_file=SPLITS_FILE, metrics=metrics)


def load_splits(path: Path) -> Splits:
    """Read a splits file written by `prepare_data` (plain arrays, never pickles)."""
    with np.load(Path(path), allow_pickle=False) as stored:
        return Splits(**{f"{axis}_{name}": stored[f"{axis}_{name}"] for name in SPLIT_NAMES for axis in "xy"})
