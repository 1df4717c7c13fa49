"""From a page and its detected boxes to the line images the recognizer reads, as PaddleOCR's system does it.

The INT8 system is judged against the FP32 one on the same pages, so both must see the lines in the same order
and cut the same way PaddleOCR cuts them (tools/infer/predict_system.py and tools/infer/utility.py): any
difference here would be counted as a quantization error.

Boxes are [4, 2] arrays of (x, y) pixel coordinates, clockwise from the top-left corner, as PaddleOCR's DB
post-processing orders them.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

SAME_LINE_PX = 10  # top-left corners closer than this in y are on one line, read left to right
VERTICAL_RATIO = 1.5  # a crop this much taller than wide holds vertical text: turned to lie along the reader


def _box(points: np.ndarray | Sequence) -> np.ndarray:
    box = np.asarray(points, dtype=np.float32)
    if box.shape != (4, 2) or not np.all(np.isfinite(box)):
        raise ValueError(f"a text box is 4 finite (x, y) corners, clockwise from the top-left; got shape "
                         f"{box.shape} ({np.asarray(points).tolist()!r})")
    return box


def reading_order(boxes: Sequence[np.ndarray]) -> list[int]:
    """The indices of `boxes` in reading order: top to bottom by their top-left corner, and boxes whose top-left
    corners are less than SAME_LINE_PX apart in y left to right, as PaddleOCR's `sorted_boxes` orders them.

    Raises:
        ValueError: a box is not a [4, 2] array of finite coordinates.
    """
    corners = [_box(box)[0] for box in boxes]
    order = sorted(range(len(corners)), key=lambda i: (float(corners[i][1]), float(corners[i][0])))
    # One insertion pass over neighbours, not a global sort by (line, x): PaddleOCR's rule is local, so a slowly
    # slanting column of boxes is not merged into one "line", and reproducing it keeps both systems' order its own.
    for end in range(len(order) - 1):
        position = end
        while position >= 0:
            upper, lower = corners[order[position]], corners[order[position + 1]]
            if abs(float(lower[1]) - float(upper[1])) < SAME_LINE_PX and float(lower[0]) < float(upper[0]):
                order[position], order[position + 1] = order[position + 1], order[position]
                position -= 1
            else:
                break
    return order


def crop_size(points: np.ndarray | Sequence) -> tuple[int, int]:
    """(width, height) of the straightened crop of a box: its longer top/bottom edge by its longer left/right edge,
    truncated to whole pixels as PaddleOCR does.

    Raises:
        ValueError: the box is not a [4, 2] array of finite coordinates.
    """
    box = _box(points)
    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    return width, height


def crop_line(page: np.ndarray, points: np.ndarray | Sequence) -> np.ndarray:
    """The box's quadrilateral of `page` warped to an upright rectangle of crop_size(points) (cubic interpolation,
    edge pixels repeated outside the page), turned 90 degrees counter-clockwise when it is at least VERTICAL_RATIO
    times taller than wide. Channels are kept as they are (BGR pages give BGR crops).

    Raises:
        ValueError: `page` is not an [H, W] or [H, W, C] uint8 array, or the box is malformed or under a pixel
            wide or high.
    """
    page = np.asarray(page)
    if page.dtype != np.uint8 or page.ndim not in (2, 3) or min(page.shape[:2]) == 0:
        raise ValueError(f"a page is an [H, W, 3] uint8 image; got dtype {page.dtype} and shape {page.shape}")
    box = _box(points)
    width, height = crop_size(box)
    if width < 1 or height < 1:
        raise ValueError(f"the box {box.tolist()} is {width} x {height} px once straightened: nothing to read; "
                         "drop boxes under a pixel wide or high before cropping")
    upright = np.float32([[0, 0], [width, 0], [width, height], [0, height]])
    transform = cv2.getPerspectiveTransform(box, upright)
    crop = cv2.warpPerspective(page, transform, (width, height), flags=cv2.INTER_CUBIC,
                               borderMode=cv2.BORDER_REPLICATE)
    if height / width >= VERTICAL_RATIO:
        crop = np.rot90(crop)
    return np.ascontiguousarray(crop)


def rec_width(crop_h: int, crop_w: int, rec_shape: tuple[int, int, int]) -> tuple[int, bool]:
    """The width a crop takes in the recognizer's input (C, H, W): resized to height H keeping its aspect ratio,
    ceil(H * crop_w / crop_h), at most W; and whether it was squeezed to W because it was wider.

    Integer arithmetic, so the ceiling never lands one pixel high on a ratio that floats cannot hold exactly.

    Raises:
        ValueError: a size is not a positive whole number.
    """
    _, height, width = rec_shape
    if min(crop_h, crop_w, height, width) < 1:
        raise ValueError(f"sizes must be positive: crop {crop_h} x {crop_w} px (h x w), recognizer input "
                         f"{tuple(rec_shape)}")
    resized = -(-height * crop_w // crop_h)
    return (width, True) if resized > width else (resized, False)
