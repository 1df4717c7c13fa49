"""Data stage: the built-in digits, an image-classification folder, text lines in PaddleOCR's layout or
the built-in digit strings, split deterministically into train / calibration / validation / test.

The validation split is for choices made after training (the INT8 recipe search); the test split
stays untouched until the gate reads it. An image folder or a text-line dataset is recorded as a file
table (`file_table.py`), never as pixels: the stages after this one stream the files (`reading.py`).
Text recognition's datasets are prepared in `text_splits.py`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sklearn.datasets import load_digits

from quantgate.config import BOX_DATASETS, FILE_DATASETS, TEXT_DATASETS, DataConfig, TransformsConfig
from quantgate.samples.augment import augmentation_record
from quantgate.samples.errors import DataError
from quantgate.samples.file_table import content_fingerprint, write_table
from quantgate.samples.image_folders import preprocessing_record
from quantgate.stages.data.folder_plan import FolderPlan, plan_image_folders
from quantgate.stages.data.outputs import DATASET_FILE, SPLIT_RULE, SPLITS_FILE, TABLE_FILE, VALIDATION_RULE
from quantgate.stages.data.stratify import SPLIT_NAMES, check_every_class, split_indices, split_rule
from quantgate.stages.data.text_lines import TextPlan, plan_text_lines
from quantgate.stages.data.text_splits import prepare_digit_strings, prepare_text_lines
from quantgate.stages.data.validation_size import validation_rule

if TYPE_CHECKING:
    from quantgate.stages.data.text_boxes import BoxPlan

CLASSIFICATION = "classification"


@dataclass(frozen=True)
class DataResult:
    metrics: dict


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 real 8x8 handwritten digits, shipped with the package (no download)."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    return images, digits.target.astype(np.int64)


DATASETS = {"digits": _load_digits}
# What an image file must go through to look like the built-in digits to the model (a deployment's recipe):
# 8x8 grey, bright ink on a dark ground, in [0, 1]. scikit-learn's 0..16 levels become 0..1 the same way.
DIGITS_TRANSFORMS = TransformsConfig(resize=(8, 8), color="grayscale")
DIGITS_NOTE = "digits are bright ink on a dark ground (as scikit-learn's); invert dark-on-light scans first"


def fingerprint(dataset: str, images: np.ndarray, labels: np.ndarray, indices: dict[str, np.ndarray]) -> str:
    """sha256 over the dataset name, the arrays (dtype, shape and bytes) and the split indices."""
    digest = hashlib.sha256(dataset.encode())
    for array in (images, labels, *(indices[name] for name in SPLIT_NAMES)):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def _write_spec(out_dir: Path, spec: dict) -> None:
    (Path(out_dir) / DATASET_FILE).write_text(json.dumps(spec, sort_keys=True, indent=2) + "\n")


def _prepare_arrays(config: DataConfig, out_dir: Path) -> dict:
    if config.dataset not in DATASETS:
        raise DataError(f"unknown dataset {config.dataset!r}; built-in datasets are {sorted(DATASETS)}")
    images, labels = DATASETS[config.dataset]()
    indices = split_indices(labels, config)
    num_classes = int(labels.max()) + 1
    check_every_class(labels, indices, num_classes, config)
    arrays = {}
    for name in SPLIT_NAMES:
        arrays[f"x_{name}"] = images[indices[name]]
        arrays[f"y_{name}"] = labels[indices[name]]
        arrays[f"index_{name}"] = indices[name]
    np.savez(Path(out_dir) / SPLITS_FILE, **arrays)
    classes = [str(k) for k in range(num_classes)]
    _write_spec(out_dir, {"task": CLASSIFICATION, "kind": "arrays", "dataset": config.dataset, "classes": classes,
                          "num_classes": num_classes,
                          "input_shape": list(images.shape[1:]), "seed": config.seed,
                          "transforms": DIGITS_TRANSFORMS.model_dump(mode="json")})
    preprocessing = preprocessing_record(DIGITS_TRANSFORMS, images.shape[1:])
    preprocessing["steps"].insert(0, DIGITS_NOTE)
    return {
        "fingerprint_sha256": fingerprint(config.dataset, images, labels, indices),
        "num_classes": num_classes,
        "input_shape": list(images.shape[1:]),
        **{f"samples_{name}": len(indices[name]) for name in SPLIT_NAMES},
        "preprocessing": preprocessing,
    }


def _prepare_folders(config: DataConfig, out_dir: Path, plan: FolderPlan) -> dict:
    write_table(Path(out_dir) / TABLE_FILE, plan.rows)
    transforms = config.transforms.model_dump(mode="json")
    _write_spec(out_dir, {"task": CLASSIFICATION, "kind": "files", "dataset": config.dataset,
                          "classes": list(plan.classes),
                          "num_classes": len(plan.classes), "input_shape": list(plan.input_shape),
                          "roots": plan.roots, "transforms": transforms,
                          "augment": config.augment.model_dump(mode="json"), "seed": config.seed})
    identity = {"dataset": config.dataset, "classes": list(plan.classes), "transforms": transforms}
    counts = {name: sum(row.split == name for row in plan.rows) for name in SPLIT_NAMES}
    source = {"classes": list(plan.classes), **plan.roots, "files": len(plan.rows),
              "bytes": sum(row.size for row in plan.rows), "table_sha256": plan.table_sha256}
    return {
        "fingerprint_sha256": content_fingerprint(plan.rows, identity),
        "num_classes": len(plan.classes),
        "input_shape": list(plan.input_shape),
        **{f"samples_{name}": counts[name] for name in SPLIT_NAMES},
        "source": source,
        "preprocessing": preprocessing_record(config.transforms, plan.input_shape),
        "augmentation": augmentation_record(config.augment, config.seed),
        "skipped_images": plan.skipped,
    }


def _prepare_text(config: DataConfig, out_dir: Path, plan: TextPlan | None, training: bool) -> dict:
    if config.dataset == "text_lines":
        spec, metrics = prepare_text_lines(config, out_dir, plan or plan_text_lines(config, training=training))
    else:
        spec, metrics = prepare_digit_strings(config, out_dir)
    _write_spec(out_dir, spec)
    return {"task": spec["task"], **metrics}


def _prepare_boxes(config: DataConfig, out_dir: Path, plan: BoxPlan | None, training: bool) -> dict:
    from quantgate.stages.data.page_splits import prepare_text_boxes  # OpenCV: only for detection datasets
    from quantgate.stages.data.text_boxes import plan_text_boxes

    spec, metrics = prepare_text_boxes(config, out_dir, plan or plan_text_boxes(config, training=training))
    _write_spec(out_dir, spec)
    return {"task": spec["task"], **metrics}


def prepare_data(config: DataConfig, out_dir: Path, plan: FolderPlan | TextPlan | BoxPlan | None = None,
                 training: bool = True) -> DataResult:
    """Split `config.dataset` and write what the later stages read (`reading.open_data`): the arrays of
    the built-in digits or digit strings, or the file table of an image folder or text lines (`plan`,
    scanned here when not given). Without `training` (a model trained elsewhere) nothing goes to the
    train split (`stratify.split_rule`).

    Raises:
        DataError: the dataset is unknown; a folder, class or image is unusable; or a split would miss a class.
        BadTextLines (a DataError): a label line, the dictionary or a line image is unusable.
    """
    if not training and config.dataset not in FILE_DATASETS:
        raise DataError(f"dataset {config.dataset!r} is built in for models trained here; a trained model is "
                        "judged on your own files: use data.dataset 'image_folder', 'text_lines' or 'text_boxes'")
    if config.dataset in TEXT_DATASETS:
        metrics = _prepare_text(config, out_dir, plan, training)
    elif config.dataset in BOX_DATASETS:
        metrics = _prepare_boxes(config, out_dir, plan, training)
    elif config.dataset == "image_folder":
        plan = plan or plan_image_folders(config, training=training)
        metrics = {"task": CLASSIFICATION, **_prepare_folders(config, out_dir, plan)}
    else:
        metrics = {"task": CLASSIFICATION, **_prepare_arrays(config, out_dir)}
    separate_test = bool(config.test_path or config.test_label_file)
    if VALIDATION_RULE not in metrics:  # text lines record theirs as they are split (validation_size.py)
        metrics[VALIDATION_RULE] = validation_rule(config, metrics["samples_validation"],
                                                   metrics["samples_calibration"], training)
    return DataResult(metrics={"dataset": config.dataset, **metrics,
                               SPLIT_RULE: split_rule(config, training, separate_test)})
