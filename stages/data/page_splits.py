"""The data stage's record of scanned pages for text detection: the file table, the dataset record and metrics."""

from __future__ import annotations

import hashlib
from pathlib import Path

from quantgate.config import DataConfig
from quantgate.samples.augment import augmentation_record
from quantgate.samples.file_table import content_fingerprint, write_table
from quantgate.samples.pages import page_preprocessing_record, page_shape
from quantgate.stages.data.outputs import PREPROCESSING, SOURCE, TABLE_FILE
from quantgate.stages.data.stratify import SPLIT_NAMES
from quantgate.stages.data.text_boxes import BoxPlan
from quantgate.tasks import TEXT_DETECTION


def prepare_text_boxes(config: DataConfig, out_dir: Path, plan: BoxPlan) -> tuple[dict, dict]:
    """Write the file table of scanned pages; (dataset record, metrics)."""
    write_table(Path(out_dir) / TABLE_FILE, plan.rows)
    transforms = config.transforms.model_dump(mode="json")
    postprocess = config.det_postprocess.model_dump(mode="json")
    spec = {"task": TEXT_DETECTION, "kind": "files", "dataset": config.dataset, "num_classes": 1,
            "input_shape": list(page_shape(config.transforms)), "roots": plan.roots, "transforms": transforms,
            "postprocess": postprocess, "augment": config.augment.model_dump(mode="json"), "seed": config.seed}
    identity = {**{key: spec[key] for key in ("task", "dataset", "transforms", "postprocess")},
                "boxes_sha256": hashlib.sha256("\n".join(row.label_name for row in plan.rows).encode()).hexdigest()}
    counts = {name: sum(row.split == name for row in plan.rows) for name in SPLIT_NAMES}
    source = {**plan.roots, "label_files": plan.label_files, "files": len(plan.rows), "boxes": plan.boxes,
              "ignored_boxes": plan.ignored, "bytes": sum(row.size for row in plan.rows),
              "table_sha256": plan.table_sha256}
    return spec, {
        "fingerprint_sha256": content_fingerprint(plan.rows, identity),
        "num_classes": 1,
        "input_shape": spec["input_shape"],
        **{f"samples_{name}": counts[name] for name in SPLIT_NAMES},
        SOURCE: source,
        PREPROCESSING: page_preprocessing_record(config.transforms, postprocess),
        "augmentation": augmentation_record(config.augment, config.seed),
        "skipped_images": [],
    }
