"""Data stage: load a built-in dataset and split it, deterministically, into train / calibration / test."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from quantgate.config import DataConfig
from quantgate.stages.errors import DataError

SPLITS_FILE = "splits.npz"
SPLIT_NAMES = ("train", "calibration", "test")


@dataclass(frozen=True)
class Splits:
    """Images as float32 NCHW in [0, 1] and int64 labels, per split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_calibration: np.ndarray
    y_calibration: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1

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


def split_indices(labels: np.ndarray, config: DataConfig) -> dict[str, np.ndarray]:
    """Stratified, seeded split of sample indices; the same config always gives the same split."""
    everything = np.arange(len(labels))
    rest, test = train_test_split(
        everything, test_size=config.test_fraction, stratify=labels, random_state=config.seed
    )
    calibration_share = config.calibration_fraction / (1.0 - config.test_fraction)
    train, calibration = train_test_split(
        rest, test_size=calibration_share, stratify=labels[rest], random_state=config.seed
    )
    return {"train": np.sort(train), "calibration": np.sort(calibration), "test": np.sort(test)}


def fingerprint(dataset: str, images: np.ndarray, labels: np.ndarray, indices: dict[str, np.ndarray]) -> str:
    """sha256 over the dataset name, the arrays (dtype, shape and bytes) and the split indices."""
    digest = hashlib.sha256(dataset.encode())
    for array in (images, labels, *(indices[name] for name in SPLIT_NAMES)):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def prepare_data(config: DataConfig, out_dir: Path) -> DataResult:
    """Load `config.dataset`, split it and write the splits to `out_dir/splits.npz`.

    Raises:
        DataError: the dataset is unknown or a split would miss a class.
    """
    if config.dataset not in DATASETS:
        raise DataError(f"unknown dataset {config.dataset!r}; built-in datasets are {sorted(DATASETS)}")
    images, labels = DATASETS[config.dataset]()
    indices = split_indices(labels, config)
    num_classes = int(labels.max()) + 1
    for name in SPLIT_NAMES:
        missing = sorted(set(range(num_classes)) - set(labels[indices[name]].tolist()))
        if missing:
            raise DataError(f"the {name} split has no samples of classes {missing}; raise data.{name}_fraction")
    arrays = {}
    for name in SPLIT_NAMES:
        arrays[f"x_{name}"] = images[indices[name]]
        arrays[f"y_{name}"] = labels[indices[name]]
        arrays[f"index_{name}"] = indices[name]
    np.savez(Path(out_dir) / SPLITS_FILE, **arrays)
    metrics = {
        "dataset": config.dataset,
        "fingerprint_sha256": fingerprint(config.dataset, images, labels, indices),
        "num_classes": num_classes,
        "input_shape": list(images.shape[1:]),
        **{f"samples_{name}": int(len(indices[name])) for name in SPLIT_NAMES},
    }
    return DataResult(splits_file=SPLITS_FILE, metrics=metrics)


def load_splits(path: Path) -> Splits:
    """Read a splits file written by `prepare_data` (plain arrays, never pickles)."""
    with np.load(Path(path), allow_pickle=False) as stored:
        return Splits(**{f"{axis}_{name}": stored[f"{axis}_{name}"] for name in SPLIT_NAMES for axis in "xy"})
