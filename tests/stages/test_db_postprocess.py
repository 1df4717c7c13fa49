"""DB post-processing on hand-drawn probability maps: which regions become boxes, and where they land on the page.

The map is the detector's whole 320x320 canvas for a 500x700 page resized to 224x320 (geometry
[500, 700, 224, 320]), so every box is scaled by 700/320 across and 500/224 down, and anything drawn below row
224 is padding, not page.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from shapely.geometry import Polygon

from quantgate.tasks.db_postprocess import DBParams, boxes_from_map, mini_box, unclip

GEOMETRY = np.asarray([500, 700, 224, 320], np.int64)
SCALE = np.asarray([700 / 320, 500 / 224])
RATIO = DBParams().unclip_ratio
TOLERANCE_PX = 3.0  # pyclipper works on whole map pixels: up to one map pixel, ~2.2 page pixels, each way
ROTATED_TOLERANCE_PX = 6.0  # a rasterized 20-degree rectangle's contour is tilted ~0.1 degree off: ~2 map pixels


def grown(corners: np.ndarray) -> np.ndarray:
    """A rectangle's corners moved outward by DB's unclip distance (area * ratio / perimeter), in page pixels."""
    shape = Polygon(corners)
    distance = shape.area * RATIO / shape.length
    center = corners.mean(axis=0)
    along = [corners[1] - corners[0], corners[3] - corners[0]]
    units = [v / np.linalg.norm(v) for v in along]
    signs = np.sign([[np.dot(c - center, u) for u in units] for c in corners])
    return (corners + distance * (signs[:, :1] * units[0] + signs[:, 1:] * units[1])) * SCALE


def drawn_map() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A map with an upright and a rotated text kernel, a speck, a faint region and a region in the padding."""
    prob = np.zeros((320, 320), np.float32)
    prob[40:61, 30:131] = 0.9  # pixels 30..130 x 40..60: the contour is a 100 x 20 rectangle
    rotated = cv2.boxPoints(((200, 150), (120, 24), 20))
    cv2.fillPoly(prob, [np.round(rotated).astype(np.int32)], 0.9)
    prob[100:102, 20:22] = 0.95  # 2x2: shorter side 1 < min_size
    prob[180:201, 30:131] = 0.45  # above thresh 0.3, below box_thresh 0.6
    prob[230:250, 200:300] = 0.9  # below the resized page's 224 rows: padding
    upright = np.asarray([[30, 40], [130, 40], [130, 60], [30, 60]], np.float64)
    return prob, {"upright": grown(upright), "rotated": grown(mini_box(np.round(rotated))[0].astype(np.float64))}


def test_text_kernels_become_page_boxes_and_noise_is_dropped():
    prob, expected = drawn_map()
    found = boxes_from_map(prob, GEOMETRY)
    assert len(found) == 2  # not the speck, the faint region or the padding
    by_top = sorted(found, key=lambda item: item[0][:, 1].min())
    upright, rotated = by_top[0], by_top[1]
    np.testing.assert_allclose(upright[0], expected["upright"], atol=TOLERANCE_PX)
    assert upright[1] == pytest.approx(0.9, abs=1e-6)
    np.testing.assert_allclose(rotated[0], expected["rotated"], atol=ROTATED_TOLERANCE_PX)
    found_shape, expected_shape = Polygon(rotated[0]), Polygon(expected["rotated"])
    assert found_shape.intersection(expected_shape).area / found_shape.union(expected_shape).area > 0.93
    assert 0.6 <= rotated[1] < 0.9  # the rectangle's corners take in a little background


def test_boxes_are_whole_pixels_clockwise_from_top_left():
    prob, _ = drawn_map()
    for corners, _ in boxes_from_map(prob, GEOMETRY):
        assert corners.shape == (4, 2) and corners.dtype == np.float32
        np.testing.assert_array_equal(corners, np.round(corners))
        top_left, top_right, bottom_right, bottom_left = corners
        assert top_left[0] < top_right[0] and bottom_left[0] < bottom_right[0]
        assert top_left[1] < bottom_left[1] and top_right[1] < bottom_right[1]
        # counter-clockwise with y up is clockwise on the image, whose y runs down
        assert Polygon(corners).exterior.is_ccw


def test_boxes_are_clipped_to_the_page():
    prob = np.zeros((320, 320), np.float32)
    prob[0:21, 0:101] = 0.9  # grows past the top-left corner
    prob[200:224, 250:320] = 0.9  # and past the bottom-right one
    found = boxes_from_map(prob, GEOMETRY)
    corners = np.concatenate([box for box, _ in found])
    assert len(found) == 2 and corners.min() == 0
    assert corners[:, 0].max() == 700 and corners[:, 1].max() == 500


def test_thresholds_and_score_mode_change_what_is_kept():
    prob, _ = drawn_map()
    assert len(boxes_from_map(prob, GEOMETRY, DBParams(box_thresh=0.4))) == 3  # the faint region now passes
    assert len(boxes_from_map(prob, GEOMETRY, DBParams(thresh=0.5))) == 2  # the faint one is not text at all
    slow = boxes_from_map(prob, GEOMETRY, DBParams(score_mode="slow"))
    assert len(slow) == 2 and all(score > 0.89 for _, score in slow)  # inside the contour: kernel pixels only
    assert len(boxes_from_map(prob, GEOMETRY, DBParams(max_candidates=1))) <= 1


def test_dilation_joins_kernels_one_pixel_apart():
    prob = np.zeros((320, 320), np.float32)
    prob[40:61, 30:81] = 0.9
    prob[40:61, 82:131] = 0.9  # a one-pixel gap at column 81
    assert len(boxes_from_map(prob, GEOMETRY)) == 2
    assert len(boxes_from_map(prob, GEOMETRY, DBParams(use_dilation=True))) == 1


def test_unclip_grows_a_rectangle_by_area_ratio_over_perimeter():
    box = np.asarray([[0, 0], [100, 0], [100, 20], [0, 20]], np.float32)
    outline = unclip(box, 1.5)  # distance 1.5 * 2000 / 240 = 12.5
    corners, short_side = mini_box(outline)
    assert short_side == pytest.approx(45, abs=1)
    np.testing.assert_allclose(corners, [[-12.5, -12.5], [112.5, -12.5], [112.5, 32.5], [-12.5, 32.5]], atol=1)


def test_an_empty_map_has_no_boxes_and_a_short_map_is_refused():
    assert boxes_from_map(np.zeros((320, 320), np.float32), GEOMETRY) == []
    with pytest.raises(ValueError, match="does not cover"):
        boxes_from_map(np.zeros((200, 320), np.float32), GEOMETRY)
    with pytest.raises(ValueError, match="score_mode"):
        DBParams(score_mode="exact")
