"""The OCR system cuts lines as PaddleOCR does (quantgate/ocr/crops.py): boxes in reading order, slanted lines come
out straight at the size PaddleOCR gives them, vertical lines are turned, and wide lines are squeezed."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from quantgate.ocr.crops import crop_line, crop_size, reading_order, rec_width

REC_SHAPE = (3, 48, 320)


def rect(x: float, y: float, width: float, height: float) -> np.ndarray:
    return np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]], np.float32)


def test_boxes_are_read_top_to_bottom_then_left_to_right():
    boxes = [rect(10, 120, 80, 20), rect(300, 12, 80, 20), rect(10, 60, 80, 20), rect(10, 10, 80, 20)]
    assert reading_order(boxes) == [3, 1, 2, 0]


def test_a_box_slightly_lower_but_further_left_on_the_same_line_comes_first():
    # The right box's top is 4 px higher, so a plain (y, x) sort would read it first.
    right, left = rect(200, 10, 80, 20), rect(10, 14, 80, 20)
    assert reading_order([right, left]) == [1, 0]


def test_boxes_ten_pixels_apart_in_y_are_on_different_lines():
    right, left = rect(200, 10, 80, 20), rect(10, 20, 80, 20)
    assert reading_order([right, left]) == [0, 1]


def test_three_boxes_of_one_line_given_right_to_left_are_read_left_to_right():
    boxes = [rect(400, 10, 50, 20), rect(200, 12, 50, 20), rect(10, 15, 50, 20), rect(10, 80, 50, 20)]
    assert reading_order(boxes) == [2, 1, 0, 3]


def test_reading_order_refuses_a_box_that_is_not_four_corners():
    with pytest.raises(ValueError, match="4 finite"):
        reading_order([np.zeros((3, 2))])


def slanted_page() -> tuple[np.ndarray, np.ndarray]:
    """A white page with a 100 x 30 px line turned by atan(3/4) (edges exactly 100 and 30 px long): its left half
    black, its right half blue. Corners clockwise from the line's top-left."""
    along, across = np.array([80.0, 60.0]), np.array([-18.0, 24.0])  # 3-4-5 triangles: lengths 100 and 30
    top_left = np.array([60.0, 40.0])
    corners = np.array([top_left, top_left + along, top_left + along + across, top_left + across], np.float32)
    page = np.full((200, 220, 3), 255, np.uint8)
    middle_top, middle_bottom = top_left + along / 2, top_left + across + along / 2
    cv2.fillPoly(page, [np.round([corners[0], middle_top, middle_bottom, corners[3]]).astype(np.int32)], (0, 0, 0))
    cv2.fillPoly(page, [np.round([middle_top, corners[1], corners[2], middle_bottom]).astype(np.int32)], (255, 0, 0))
    return page, corners


def test_a_slanted_line_comes_out_straight_at_its_edge_lengths():
    page, corners = slanted_page()
    crop = crop_line(page, corners)
    assert crop.shape == (30, 100, 3) and crop.dtype == np.uint8
    inner = crop[4:26]
    assert inner[:, 4:44].max() < 60  # the black half, on every row
    blue = inner[:, 56:96].astype(int)
    assert blue[..., 0].min() > 200 and blue[..., 1].max() < 60
    # Straight: on every row the black half ends within a pixel or two of the middle.
    ends = [int(np.argmax(row[:, 0] > 128)) for row in inner]
    assert min(ends) >= 48 and max(ends) <= 52


def test_a_crop_size_is_truncated_to_whole_pixels_like_paddleocr():
    assert crop_size(rect(0, 0, 100.9, 30.9)) == (100, 30)
    assert crop_size([[0, 0], [100, 0], [104, 32], [0, 30]]) == (104, 32)  # the longer of each pair of edges


def test_a_line_at_least_one_and_a_half_times_taller_than_wide_is_turned():
    page = np.full((100, 100, 3), 255, np.uint8)
    page[10:20, 10:30] = 0  # the top third of a 20 x 30 px vertical line is black
    crop = crop_line(page, rect(10, 10, 20, 30))
    assert crop.shape == (20, 30, 3)
    # np.rot90 turns counter-clockwise, as PaddleOCR does: the line's top ends up on the left.
    assert crop[:, :8].max() < 60 and crop[:, 14:].min() > 200
    assert crop_line(page, rect(10, 10, 20, 29)).shape == (29, 20, 3)  # 1.45: left standing


def test_a_box_under_a_pixel_high_is_refused():
    with pytest.raises(ValueError, match="0 px|nothing to read"):
        crop_line(np.zeros((50, 50, 3), np.uint8), rect(5, 5, 30, 0.5))


def test_rec_width_keeps_the_aspect_ratio_up_to_the_input_width():
    assert rec_width(48, 100, REC_SHAPE) == (100, False)
    assert rec_width(24, 100, REC_SHAPE) == (200, False)
    assert rec_width(7, 10, REC_SHAPE) == (69, False)  # 68.57 rounded up
    assert rec_width(48, 320, REC_SHAPE) == (320, False)  # exactly as wide is not squeezed


def test_rec_width_squeezes_a_line_wider_than_the_input():
    assert rec_width(48, 321, REC_SHAPE) == (320, True)
    assert rec_width(30, 400, REC_SHAPE) == (320, True)


def test_rec_width_refuses_an_empty_crop():
    with pytest.raises(ValueError, match="positive"):
        rec_width(0, 10, REC_SHAPE)
