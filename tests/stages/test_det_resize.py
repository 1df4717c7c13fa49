"""A page as the detector's input: PaddleOCR's resize rule, normalization, channel order and the fixed canvas."""

from __future__ import annotations

import numpy as np
import pytest

from quantgate.tasks.det_resize import PageTooLarge, det_resize_shape, fits_canvas, page_input

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize(("height", "width", "limit", "limit_type", "expected"), [
    (1200, 800, 960, "max", (960, 640)),  # ratio 0.8: 960 x 640, already multiples of 32
    (100, 50, 960, "max", (96, 64)),  # never enlarged: 100/32 = 3.1 -> 96, 50/32 = 1.6 -> 64
    (10, 10, 960, "max", (32, 32)),  # 10/32 rounds to 0: at least one stride
    (100, 200, 736, "min", (736, 1472)),  # ratio 7.36 lifts the short side to 736
    (1000, 2000, 736, "min", (992, 1984)),  # never shrunk: 31.25 -> 31 strides, 62.5 -> 62 (half to even)
    (300, 400, 960, "resize_long", (704, 960)),  # ratio 2.4: 720 is 22.5 strides -> 22 (half to even)
    (2000, 1000, 960, "resize_long", (960, 480)),  # shrinks as well: the long side becomes the limit
])
def test_resize_shape_follows_paddleocr_limit_types(height, width, limit, limit_type, expected):
    assert det_resize_shape(height, width, limit, limit_type) == expected


def test_unknown_limit_type_is_refused():
    with pytest.raises(ValueError, match="limit_type"):
        det_resize_shape(100, 100, 960, "longest")


def test_page_is_resized_normalized_and_padded_with_zeros_on_the_canvas():
    page = np.full((400, 600, 3), 255, np.uint8)
    array, geometry = page_input(page, (640, 640), 960, "max", MEAN, STD, "bgr")
    # 400 is 12.5 strides -> 12 (384); 600 is 18.75 -> 19 (608)
    assert array.shape == (3, 640, 640) and array.dtype == np.float32
    assert geometry.tolist() == [400, 600, 384, 608] and geometry.dtype == np.int64
    white = (1.0 - np.asarray(MEAN)) / np.asarray(STD)
    np.testing.assert_allclose(array[:, :384, :608], np.broadcast_to(white[:, None, None], (3, 384, 608)), rtol=1e-5)
    assert not array[:, 384:, :].any() and not array[:, :, 608:].any()


@pytest.mark.parametrize(("color", "first_channel_value"), [("bgr", 0.0), ("rgb", 1.0)])
def test_channel_order_puts_blue_or_red_first(color, first_channel_value):
    red = np.zeros((64, 64, 3), np.uint8)
    red[..., 0] = 255
    array, _ = page_input(red, (64, 64), 960, "max", MEAN, STD, color)
    np.testing.assert_allclose(array[0], (first_channel_value - MEAN[0]) / STD[0], rtol=1e-5)
    np.testing.assert_allclose(array[2], (1.0 - first_channel_value - MEAN[2]) / STD[2], rtol=1e-5)


def test_resize_is_bilinear_to_the_rounded_shape():
    page = np.zeros((100, 50, 3), np.uint8)
    page[:, 25:] = 200  # a vertical edge: bilinear resizing leaves an in-between column at it
    array, geometry = page_input(page, (128, 128), 960, "max", (0, 0, 0), (1, 1, 1), "rgb")
    assert geometry.tolist() == [100, 50, 96, 64]
    row = array[0, 50, :64] * 255
    assert row[0] == 0 and row[-1] == pytest.approx(200, abs=0.5)
    assert np.any((row > 1) & (row < 199))


def test_page_too_large_for_the_canvas_names_both_sizes():
    tall = np.zeros((2000, 500, 3), np.uint8)  # 960 x 240 -> 240 is 7.5 strides -> 8 (256)
    assert not fits_canvas(2000, 500, (640, 640), 960, "max")
    assert fits_canvas(2000, 500, (960, 640), 960, "max")
    with pytest.raises(PageTooLarge, match=r"2000x500 page resizes to 960x256.*640x640") as raised:
        page_input(tall, (640, 640), 960, "max", MEAN, STD, "bgr")
    assert isinstance(raised.value, ValueError)


def test_a_page_that_is_not_an_rgb_uint8_image_is_refused():
    with pytest.raises(ValueError, match="uint8"):
        page_input(np.zeros((64, 64, 3), np.float32), (64, 64), 960, "max", MEAN, STD, "bgr")
    with pytest.raises(ValueError, match=r"\[h, w, 3\]"):
        page_input(np.zeros((64, 64), np.uint8), (64, 64), 960, "max", MEAN, STD, "bgr")
    with pytest.raises(ValueError, match="color"):
        page_input(np.zeros((64, 64, 3), np.uint8), (64, 64), 960, "max", MEAN, STD, "gray")
