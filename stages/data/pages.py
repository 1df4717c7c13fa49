"""Reading and recording pages for text detection: each page decoded, resized and normalized onto the canvas.

The same steps run for calibration, validation, test and (as recorded in the data manifest) a deployment:
decode as RGB; resize as PaddleOCR's DetResizeForTest does (`data.transforms.det_limit_side_len`,
`det_limit_type`, sides rounded to multiples of 32); put in the model's channel order; scale to [0, 1];
normalize with the transforms' mean and std; pad with zeros to `det_canvas` at the top-left. A page's label
in a batch is its geometry `[h, w, resized_h, resized_w]`, which maps the detected boxes back to the page.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from quantgate.config import DataConfig, TransformsConfig
from quantgate.stages.data.augment import augmentation_record
from quantgate.stages.data.file_hashes import DECODE_ERRORS
from quantgate.stages.data.file_table import FileRow, content_fingerprint, write_table
from quantgate.stages.data.outputs import PREPROCESSING, SOURCE, TABLE_FILE
from quantgate.stages.data.recorded_image import FILE_UNREADABLE, READ_OK, RecordedImages, read_recorded
from quantgate.stages.data.stratify import SPLIT_NAMES
from quantgate.stages.data.text_boxes import BoxPlan
from quantgate.stages.tasks.det_resize import PageTooLarge, page_input

TEXT_DETECTION = "text_detection"
GEOMETRY = 4  # a page's label in a batch: [h, w, resized_h, resized_w]


def page_shape(transforms: TransformsConfig) -> tuple[int, int, int]:
    """[C, H, W] of the detector's input: 3 channels on the canvas."""
    return (3, *transforms.det_canvas)


def page_pixels(rgb: np.ndarray, transforms: TransformsConfig) -> tuple[np.ndarray, np.ndarray]:
    """An RGB page as the detector's input [3, H, W] and its geometry (see the module docstring).

    Raises:
        PageTooLarge: the resized page is larger than det_canvas.
    """
    return page_input(rgb, tuple(transforms.det_canvas), transforms.det_limit_side_len, transforms.det_limit_type,
                      transforms.mean, transforms.std, transforms.color)


class PageSplit(RecordedImages):
    """One split's pages: item `i` is (pixels float32 [3, H, W], geometry int64 [4], i, status), as the other
    datasets' items; a changed or undecodable file gives zeros and a status instead of raising."""

    def __init__(self, rows: list[FileRow], roots: dict[str, str], transforms: TransformsConfig):
        super().__init__(rows, roots)
        self.transforms, self.input_shape = transforms, page_shape(transforms)

    def prepare(self, index: int):
        image = read_recorded(self.path(index), self.rows[index], "RGB")
        if isinstance(image, int):
            return self._failed(index, image)
        try:
            pixels, geometry = page_pixels(np.asarray(image), self.transforms)
        except (*DECODE_ERRORS, PageTooLarge):  # the data stage checked the size: a changed file
            return self._failed(index, FILE_UNREADABLE)
        return pixels, geometry, np.int64(index), np.int8(READ_OK)

    def _failed(self, index: int, status: int):
        return np.zeros(self.input_shape, np.float32), np.zeros(GEOMETRY, np.int64), np.int64(index), np.int8(status)


def page_preprocessing_record(transforms: TransformsConfig, postprocess: dict) -> dict:
    """What a deployment must do to a page before and after the detector, in order."""
    channels, height, width = page_shape(transforms)
    return {
        "steps": [
            f"decode as RGB{' and reorder to BGR' if transforms.color == 'bgr' else ''}",
            f"resize as PaddleOCR's DetResizeForTest: limit_side_len {transforms.det_limit_side_len}, limit_type "
            f"{transforms.det_limit_type!r}, each side rounded to a multiple of 32 (bilinear, OpenCV)",
            "scale pixels to [0, 1] (divide by 255)",
            f"normalize (x - mean) / std with mean={list(transforms.mean)} std={list(transforms.std)}",
            f"pad with zeros at the bottom and right to {height}x{width} (det_canvas)",
            "layout NCHW float32",
            "DB post-process the [N, 1, H, W] probability map of the resized part: binarize at thresh, contours, "
            f"box score, unclip, minimum-area boxes, mapped back to page pixels ({postprocess})",
        ],
        "transforms": transforms.model_dump(mode="json"),
        "postprocess": postprocess,
        "input_shape": [channels, height, width],
    }


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
