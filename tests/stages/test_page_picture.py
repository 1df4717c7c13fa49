"""The report's page pictures (quantgate/pictures/page_picture.py): the page with both systems' boxes, the lines they
read differently in red, a panel that lists them (with a CJK font, or by number without one), and line crops."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import OcrSamplesError, cjk_font  # noqa: E402

from quantgate.ocr.crops import crop_line  # noqa: E402
from quantgate.pictures.fonts import choose_font  # noqa: E402
from quantgate.pictures.page_picture import (  # noqa: E402
    INT8_COLOUR,
    LINE_PX,
    MARGIN_PX,
    PANEL_WIDTH,
    draw_page,
    picture_strings,
    save_crops,
)


def rect(x: float, y: float, width: float = 120, height: float = 30) -> np.ndarray:
    return np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]], np.float32)


PAGE_H, PAGE_W = 300, 240
GT = [{"points": rect(20, 20).tolist(), "transcription": "发票号码"},
      {"points": rect(20, 100).tolist(), "transcription": "金额100"},
      {"points": rect(20, 180).tolist(), "transcription": "王伟"}]
FP32 = [(rect(20, 20), "发票号码"), (rect(20, 100), "金额100"), (rect(20, 180), "王伟")]
INT8 = [(rect(21, 21), "发票号码"), (rect(21, 101), "金额10O")]  # misreads 金额100, misses 王伟
DIFFERING = {1, 2}
LEGEND_PX = MARGIN_PX + 4 * LINE_PX  # the panel's legend: three lines and a blank one


def white_page() -> np.ndarray:
    return np.full((PAGE_H, PAGE_W, 3), 255, np.uint8)


def picture(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB")).astype(int)


def reddish(pixel: np.ndarray) -> bool:
    red, green, blue = pixel
    return red > 200 and red - green > 50 and red - blue > 50


@pytest.fixture(scope="module")
def font() -> str:
    try:
        return str(cjk_font())
    except OcrSamplesError as exc:
        pytest.skip(str(exc))


def test_without_a_font_the_picture_has_the_page_the_panel_and_red_lines_where_they_differ(tmp_path):
    out = draw_page(white_page(), GT, FP32, INT8, DIFFERING, tmp_path / "page.png", None)
    assert out == tmp_path / "page.png" and out.is_file()
    pixels = picture(out)
    assert pixels.shape == (PAGE_H, PAGE_W + PANEL_WIDTH, 3)
    assert reddish(pixels[115, 80]) and reddish(pixels[195, 80])  # inside the two differing lines
    assert tuple(pixels[35, 80]) == (255, 255, 255)  # the line both read alike stays as it was
    assert (np.abs(pixels[:, :PAGE_W] - INT8_COLOUR).sum(axis=2) < 30).any()  # the INT8 boxes are drawn
    assert (pixels[:, PAGE_W:] < 128).any()  # the panel says something
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_with_a_cjk_font_the_panel_draws_the_strings(tmp_path, font):
    with_font = picture(draw_page(white_page(), GT, FP32, INT8, DIFFERING, tmp_path / "font.png", font))
    without = picture(draw_page(white_page(), GT, FP32, INT8, DIFFERING, tmp_path / "none.png", None))
    assert with_font.shape == (PAGE_H, PAGE_W + PANEL_WIDTH, 3)
    assert reddish(with_font[115, 80])
    # Pixel rows with ink in the panel below its legend: three strings per line with the font, one short sentence
    # (number and who was right) without.
    inked_rows = lambda pixels: int((pixels[LEGEND_PX:, PAGE_W:] < 160).any(axis=(1, 2)).sum())  # noqa: E731
    assert inked_rows(with_font) > 2 * inked_rows(without) > 0


def test_the_picture_grows_taller_than_the_page_when_many_lines_differ(tmp_path, font):
    gt = [{"points": rect(0, 4 * row, 60, 3).tolist(), "transcription": f"第{row}行"} for row in range(20)]
    out = draw_page(np.full((80, 80, 3), 255, np.uint8), gt, [], [], set(range(20)), tmp_path / "tall.png", font)
    width, height = Image.open(out).size
    assert width == 80 + PANEL_WIDTH and height > 20 * 60


def test_a_bgr_page_is_shown_in_its_real_colours(tmp_path):
    page = white_page()
    page[250:290, 150:230] = (255, 0, 0)  # blue, in cv2's channel order
    pixels = picture(draw_page(page, GT, FP32, INT8, set(), tmp_path / "bgr.png", None, order="BGR"))
    assert tuple(pixels[270, 190]) == (0, 0, 255)


def test_a_differing_index_that_is_no_line_of_the_page_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"\[3\]"):
        draw_page(white_page(), GT, FP32, INT8, {3}, tmp_path / "page.png", None)


def test_picture_strings_are_the_truths_and_readings_of_the_differing_lines():
    strings = picture_strings(GT, FP32, INT8, DIFFERING)
    assert {"金额100", "金额10O", "王伟"} <= set(strings) and "发票号码" not in strings


def test_the_reports_font_choice_for_the_picture_strings_draws_them(tmp_path, font):
    choice = choose_font(picture_strings(GT, FP32, INT8, DIFFERING))
    assert choice.draws_strings  # a CJK font is installed (the fixture skipped otherwise)
    assert draw_page(white_page(), GT, FP32, INT8, DIFFERING, tmp_path / "page.png", choice.path).is_file()


def test_crops_of_the_differing_lines_are_saved_as_the_recognizer_got_them(tmp_path):
    page = np.random.default_rng(0).integers(0, 256, (PAGE_H, PAGE_W, 3), dtype=np.uint8)
    paths = save_crops(page, [("p0_l1", GT[1]["points"]), ("p0_l2", GT[2]["points"])], tmp_path / "crops")
    assert paths == [tmp_path / "crops" / "p0_l1.png", tmp_path / "crops" / "p0_l2.png"]
    assert np.array_equal(np.asarray(Image.open(paths[0])), crop_line(page, np.array(GT[1]["points"])))


def test_crop_names_must_be_plain_and_distinct(tmp_path):
    with pytest.raises(ValueError, match="plain file names"):
        save_crops(white_page(), [("../escape", GT[0]["points"])], tmp_path)
    with pytest.raises(ValueError, match="distinct"):
        save_crops(white_page(), [("a", GT[0]["points"]), ("a", GT[1]["points"])], tmp_path)
