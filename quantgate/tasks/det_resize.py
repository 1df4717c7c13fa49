"""A page as a text detector's input: PaddleOCR's DetResizeForTest (resize type 0), normalized, on a fixed canvas.

PaddleOCR feeds each page at its own size (a multiple of 32). Exported and quantized programs here take one
fixed input shape, so the resized page is placed at the top-left of a zero canvas of that shape, after
normalization (zero is then the mean colour, as the detector sees nothing there). The geometry
`[h, w, resized_h, resized_w]` travels with the page so that post-processing crops the probability map back to
the resized page and maps boxes to page pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

LIMIT_TYPES = ("max", "min", "resize_long")
COLORS = ("rgb", "bgr")
STRIDE = 32  # the DB detectors downsample by 32: both sides of the input must be multiples of it


class PageTooLarge(ValueError):
    """The resized page does not fit the detector's fixed input canvas."""


def _to_stride(side: int) -> int:
    # Python's round (half to even) as PaddleOCR uses it; never below one stride.
    return max(int(round(side / STRIDE) * STRIDE), STRIDE)


def det_resize_shape(height: int, width: int, limit_side_len: int, limit_type: str) -> tuple[int, int]:
    """The (height, width) PaddleOCR's DetResizeForTest (type 0) resizes a `height` x `width` page to.

    "max" shrinks the page so its longer side is at most `limit_side_len` (never enlarges); "min" enlarges it so
    its shorter side is at least `limit_side_len` (never shrinks); "resize_long" scales the longer side to exactly
    `limit_side_len`. The scaled sides are truncated to integers, then each rounded to the nearest multiple of 32
    (at least 32), so the aspect ratio is kept only approximately.

    Raises:
        ValueError: an unknown `limit_type`, or a page or limit that is not positive.
    """
    if limit_type not in LIMIT_TYPES:
        raise ValueError(f"unknown limit_type {limit_type!r}; known: {', '.join(LIMIT_TYPES)}")
    if height <= 0 or width <= 0 or limit_side_len <= 0:
        raise ValueError(f"a page of {height}x{width} with limit_side_len {limit_side_len}: all must be positive")
    if limit_type == "max":
        ratio = limit_side_len / max(height, width) if max(height, width) > limit_side_len else 1.0
    elif limit_type == "min":
        ratio = limit_side_len / min(height, width) if min(height, width) < limit_side_len else 1.0
    else:
        ratio = limit_side_len / max(height, width)
    return _to_stride(int(height * ratio)), _to_stride(int(width * ratio))


def fits_canvas(height: int, width: int, canvas: tuple[int, int], limit_side_len: int, limit_type: str) -> bool:
    """Whether a `height` x `width` page, once resized, fits a (canvas height, canvas width) input."""
    resized_h, resized_w = det_resize_shape(height, width, limit_side_len, limit_type)
    return resized_h <= canvas[0] and resized_w <= canvas[1]


def page_input(rgb: np.ndarray, canvas: tuple[int, int], limit_side_len: int, limit_type: str,
               mean: Sequence[float], std: Sequence[float], color: str) -> tuple[np.ndarray, np.ndarray]:
    """A page as the detector's input [3, canvas height, canvas width] float32, and its geometry.

    The RGB uint8 page is resized (bilinear) to `det_resize_shape`, put in the model's channel order (`color`:
    PaddleOCR's detectors read OpenCV's BGR), scaled by 1/255 and normalized with `mean` and `std` given in that
    channel order, and placed at the top-left of a zero canvas. The geometry is int64
    `[height, width, resized_height, resized_width]`.

    Raises:
        PageTooLarge: the resized page is larger than `canvas` (the message gives both sizes).
        ValueError: `rgb` is not an [h, w, 3] uint8 image, or `color` or `limit_type` is unknown.
    """
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"a page must be an [h, w, 3] uint8 RGB image, not {rgb.dtype} of shape {rgb.shape}")
    if color not in COLORS:
        raise ValueError(f"unknown color order {color!r}; known: {', '.join(COLORS)}")
    height, width = rgb.shape[:2]
    resized_h, resized_w = det_resize_shape(height, width, limit_side_len, limit_type)
    if resized_h > canvas[0] or resized_w > canvas[1]:
        raise PageTooLarge(f"a {height}x{width} page resizes to {resized_h}x{resized_w} (limit_side_len "
                           f"{limit_side_len}, limit_type {limit_type!r}), larger than the {canvas[0]}x{canvas[1]} "
                           "input canvas (height x width)")
    resized = cv2.resize(np.ascontiguousarray(rgb), (resized_w, resized_h), interpolation=cv2.INTER_LINEAR)
    if color == "bgr":
        resized = resized[:, :, ::-1]
    normalized = (resized.astype(np.float32) / 255.0 - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    page = np.zeros((3, canvas[0], canvas[1]), np.float32)
    page[:, :resized_h, :resized_w] = normalized.transpose(2, 0, 1)
    return page, np.asarray([height, width, resized_h, resized_w], np.int64)
