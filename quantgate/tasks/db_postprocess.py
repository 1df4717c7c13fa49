"""DB (Differentiable Binarization) post-processing: a text detector's probability map as quadrilaterals.

The same steps as PaddleOCR's DBPostProcess with box_type "quad", so the boxes (and the hmean computed on them)
are those PaddleOCR reports for the same map. The defaults are PP-OCRv4's detector settings (box_thresh 0.6,
unclip_ratio 1.5), not DBPostProcess's constructor defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pyclipper
from shapely.geometry import Polygon

SCORE_MODES = ("fast", "slow")


@dataclass(frozen=True)
class DBParams:
    """How a probability map becomes boxes (PaddleOCR's PostProcess settings for a DB detector)."""

    thresh: float = 0.3  # a pixel is text when its probability is above this
    box_thresh: float = 0.6  # a box is kept when its mean probability is at least this
    max_candidates: int = 1000  # contours looked at per page, in OpenCV's order
    unclip_ratio: float = 1.5  # how far a shrunk text kernel is grown back: distance = area * ratio / perimeter
    min_size: int = 3  # shortest side, in map pixels, below which a box is noise
    use_dilation: bool = False  # dilate the binary map with a 2x2 kernel before finding contours
    score_mode: str = "fast"  # "fast": mean inside the box's rectangle; "slow": mean inside the contour

    def __post_init__(self) -> None:
        if self.score_mode not in SCORE_MODES:
            raise ValueError(f"unknown score_mode {self.score_mode!r}; known: {', '.join(SCORE_MODES)}")


def mini_box(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The minimum-area rectangle around `points` as [4, 2] float32 corners, and its shorter side.

    The corners run clockwise on the image (y down) from the top-left: of the two leftmost corners the upper one
    starts, of the two rightmost the upper one comes second. Ties in y pick the later of the pair, as PaddleOCR's
    get_mini_boxes does, so both produce the same corner order for the matcher and the report.
    """
    rectangle = cv2.minAreaRect(np.asarray(points, np.float32).reshape(-1, 1, 2))
    corners = sorted(cv2.boxPoints(rectangle), key=lambda corner: corner[0])
    top_left, bottom_left = (corners[0], corners[1]) if corners[1][1] > corners[0][1] else (corners[1], corners[0])
    top_right, bottom_right = (corners[2], corners[3]) if corners[3][1] > corners[2][1] else (corners[3], corners[2])
    return np.asarray([top_left, top_right, bottom_right, bottom_left], np.float32), float(min(rectangle[1]))


def _masked_mean(prob: np.ndarray, polygon: np.ndarray) -> float:
    """Mean of `prob` over the pixels inside `polygon`, filled on the polygon's clipped bounding box."""
    height, width = prob.shape
    x_min = int(np.clip(np.floor(polygon[:, 0].min()), 0, width - 1))
    x_max = int(np.clip(np.ceil(polygon[:, 0].max()), 0, width - 1))
    y_min = int(np.clip(np.floor(polygon[:, 1].min()), 0, height - 1))
    y_max = int(np.clip(np.ceil(polygon[:, 1].max()), 0, height - 1))
    mask = np.zeros((y_max - y_min + 1, x_max - x_min + 1), np.uint8)
    shifted = polygon - np.asarray([x_min, y_min], polygon.dtype)
    # astype truncates toward zero, as PaddleOCR's fill does; rounding instead would shift the score slightly
    cv2.fillPoly(mask, shifted.reshape(1, -1, 2).astype(np.int32), 1)
    return float(cv2.mean(prob[y_min:y_max + 1, x_min:x_max + 1], mask)[0])


def box_score(prob: np.ndarray, box: np.ndarray, contour: np.ndarray, score_mode: str) -> float:
    """A candidate's confidence: the map's mean inside its rectangle ("fast") or inside its contour ("slow")."""
    return _masked_mean(prob, box if score_mode == "fast" else contour.reshape(-1, 2).astype(np.float32))


def unclip(box: np.ndarray, unclip_ratio: float) -> np.ndarray:
    """`box` grown outward by area * ratio / perimeter, with round joins: the detector predicts a shrunk kernel
    of each text region (DB's training labels shrink by the same rule), so this restores the region's extent.

    Returns the grown outline's points [K, 2] (all paths together when clipper returns several; empty if none).
    """
    shape = Polygon(box)
    if shape.length == 0:
        return np.zeros((0, 2), np.float32)
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    paths = offset.Execute(shape.area * unclip_ratio / shape.length)
    return np.asarray([point for path in paths for point in path], np.float32).reshape(-1, 2)


def boxes_from_map(prob: np.ndarray, geometry: np.ndarray, params: DBParams = DBParams()
                   ) -> list[tuple[np.ndarray, float]]:
    """The text boxes of one page, in page pixels, with their scores, from the detector's probability map.

    `prob` is the [H, W] map of the whole input canvas; `geometry` is the page's `[h, w, resized_h, resized_w]`
    from `page_input`. Steps, as PaddleOCR's DBPostProcess (quad):

    1. crop the map to the resized page ([:resized_h, :resized_w]); the padding beyond it is not the page;
    2. binarize at `thresh` (probability > thresh), optionally dilate with a 2x2 kernel;
    3. find the outer and inner contours (RETR_LIST, CHAIN_APPROX_SIMPLE), at most `max_candidates` of them;
    4. per contour: the minimum-area rectangle (`mini_box`), dropped if its shorter side < `min_size`;
       its score (`box_score`), dropped if < `box_thresh`; grown by `unclip` (dropped if nothing is left); the
       minimum-area rectangle of the grown outline, dropped if its shorter side < `min_size + 2`;
    5. the corners scaled to the page (x * w / resized_w, y * h / resized_h), rounded, clipped to [0, w] and
       [0, h] (the page's edges, as PaddleOCR clips).

    Returns [(corners [4, 2] float32 holding whole numbers, clockwise from top-left, score)], in contour order.

    Raises:
        ValueError: `prob` is not a 2-D map covering the resized page.
    """
    height, width, resized_h, resized_w = (int(v) for v in np.asarray(geometry).reshape(4))
    if prob.ndim != 2 or prob.shape[0] < resized_h or prob.shape[1] < resized_w:
        raise ValueError(f"a probability map of shape {prob.shape} does not cover the resized page "
                         f"{resized_h}x{resized_w}")
    page_map = np.ascontiguousarray(prob[:resized_h, :resized_w], np.float32)
    binary = (page_map > params.thresh).astype(np.uint8)
    if params.use_dilation:
        binary = cv2.dilate(binary, np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(binary * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    found = []
    for contour in contours[:params.max_candidates]:
        box, short_side = mini_box(contour)
        if short_side < params.min_size:
            continue
        score = box_score(page_map, box, contour, params.score_mode)
        if score < params.box_thresh:
            continue
        grown = unclip(box, params.unclip_ratio)
        if len(grown) < 3:
            continue
        box, short_side = mini_box(grown)
        if short_side < params.min_size + 2:
            continue
        # float32 divide-then-multiply, as PaddleOCR computes it: a corner at exactly .5 then rounds the same way
        on_page = np.empty_like(box)
        on_page[:, 0] = np.clip(np.round(box[:, 0] / np.float32(resized_w) * np.float32(width)), 0, width)
        on_page[:, 1] = np.clip(np.round(box[:, 1] / np.float32(resized_h) * np.float32(height)), 0, height)
        found.append((on_page, score))
    return found
