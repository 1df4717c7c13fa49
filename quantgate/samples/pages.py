"""Reading and recording pages for text detection: each page decoded, resized and normalized onto the canvas.

The same steps run for calibration, validation, test and (as recorded in the data manifest) a deployment:
decode as RGB; resize as PaddleOCR's DetResizeForTest does (`data.transforms.det_limit_side_len`,
`det_limit_type`, sides rounded to multiples of 32); put in the model's channel order; scale to [0, 1];
normalize with the transforms' mean and std; pad with zeros to `det_canvas` at the top-left. A page's label
in a batch is its geometry `[h, w, resized_h, resized_w]`, which maps the detected boxes back to the page.
"""

from __future__ import annotations

import numpy as np

from quantgate.config import TransformsConfig
from quantgate.samples.file_hashes import DECODE_ERRORS
from quantgate.samples.file_table import FileRow
from quantgate.samples.recorded_image import FILE_UNREADABLE, READ_OK, RecordedImages, read_recorded
from quantgate.tasks.det_resize import PageTooLarge, page_input

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
