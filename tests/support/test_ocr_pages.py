"""The demo pages (`quantgate demo-pages`) are reproducible, labelled tightly in PaddleOCR's format, inside PaddleOCR's
dictionary; their boxes are where PaddleOCR's own PP-OCRv4 detector sees text, and its recognizer reads each box as
labelled."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantgate.cli import main
from quantgate.demo.pages import (
    BOX_MARGIN_PX,
    CALIBRATION_FILE,
    LINES_PER_PAGE,
    TEST_FILE,
    render_pages,
    write_demo_dataset,
    write_det_label_file,
)
from quantgate.demo.text import DemoError
from quantgate.stages.data.det_labels import check_inside, read_box_label_file
from support.ocr_samples import (
    ctc_greedy,
    missing_characters,
    paddleocr_models,
    predictor,
    resize_norm_pad,
    run_predictor,
)

PAGES = 24  # eight of each kind
DET_MEAN, DET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # PaddleOCR's det normalize
SHRINK_RATIO = 0.4  # DB's text kernel: the box moved in by area * (1 - r^2) / perimeter (PaddleOCR MakeShrinkMap)
FAR_PX = 8  # "far from text": this much paper away from every box


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[Path, list[tuple[str, list[dict]]]]:
    root = tmp_path_factory.mktemp("pages")
    return root, render_pages(root, PAGES, seed=11)  # its first three: two with a seal ring, two with a table


def rectangles(boxes: list[dict]) -> list[tuple[int, int, int, int]]:
    """Each box as (x0, y0, x1, y1), checking on the way that it is an upright rectangle written clockwise."""
    found = []
    for box in boxes:
        (x0, y0), (x1, top), (right, y1), (left, bottom) = box["points"]
        assert (top, right, left, bottom) == (y0, x1, x0, y1) and x0 < x1 and y0 < y1, box
        assert all(type(value) is int for point in box["points"] for value in point), box
        found.append((x0, y0, x1, y1))
    return found


def test_the_same_seed_renders_the_same_pages_byte_for_byte(tmp_path, pages):
    root, entries = pages
    again = render_pages(tmp_path / "again", 6, seed=11)
    assert again == entries[:6]  # a page depends on the seed and its index only, not on how many are made
    assert all((tmp_path / "again" / path).read_bytes() == (root / path).read_bytes() for path, _ in again)
    assert [boxes for _, boxes in render_pages(tmp_path / "other", 6, seed=12)] != [boxes for _, boxes in again]


def test_pages_are_cheques_invoices_and_slips_that_fit_a_960_canvas(pages):
    root, entries = pages
    titles = [boxes[0]["transcription"] for _, boxes in entries]
    assert all(title.endswith("支票") for title in titles[0::3])
    assert all("发票" in title for title in titles[1::3])
    assert all(title.endswith("单") for title in titles[2::3])
    for path, _ in entries:
        image = Image.open(root / path)
        assert max(image.size) <= 960 and image.width >= 800 and 400 <= image.height <= 700, path
    sizes = [os.path.getsize(root / path) for path, _ in entries]
    assert max(sizes) < 40_000, sizes  # a few hundred pages stay a few megabytes


def test_every_page_holds_5_to_12_separate_boxes_inside_it(pages):
    root, entries = pages
    for path, boxes in entries:
        width, height = Image.open(root / path).size
        assert LINES_PER_PAGE[0] <= len(boxes) <= LINES_PER_PAGE[1], path
        found = rectangles(boxes)
        assert all(0 <= x0 and 0 <= y0 and x1 <= width and y1 <= height for x0, y0, x1, y1 in found), path
        for i, (ax0, ay0, ax1, ay1) in enumerate(found):
            for bx0, by0, bx1, by1 in found[i + 1:]:
                assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, (path, boxes)


def test_boxes_are_tight_around_the_ink(pages):
    """Independently of how the renderer measured it: inside each box, the ink starts BOX_MARGIN_PX (+-1 for
    antialiasing) from every edge, and the box's own outline is blank paper."""
    root, entries = pages
    for path, boxes in entries[:9]:
        grey = np.asarray(Image.open(root / path).convert("L"), np.int16)
        for (x0, y0, x1, y1), box in zip(rectangles(boxes), boxes):
            crop = grey[y0:y1, x0:x1]
            ink = crop < np.median(crop) - 60
            rows, columns = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
            margins = (columns[0], rows[0], crop.shape[1] - 1 - columns[-1], crop.shape[0] - 1 - rows[-1])
            assert all(BOX_MARGIN_PX - 1 <= margin <= BOX_MARGIN_PX + 1 for margin in margins), (path, box, margins)


def test_every_text_is_in_the_paddleocr_dictionary(pages):
    texts = [box["transcription"] for _, boxes in pages[1] for box in boxes]
    assert missing_characters(texts, paddleocr_models().dictionary()) == set()
    assert all(text == text.strip() and "  " not in text for text in texts)


def test_label_files_parse_back_through_the_data_stage(tmp_path):
    written = write_demo_dataset(tmp_path, 6, seed=2, test_fraction=0.5)
    assert written == {"calibration": tmp_path / CALIBRATION_FILE, "test": tmp_path / TEST_FILE}
    entries = render_pages(tmp_path / "same", 6, seed=2)
    for name, expected in (("test", entries[:3]), ("calibration", entries[3:])):
        lines = read_box_label_file(written[name], tmp_path, name)
        assert [line.file for line in lines] == [path for path, _ in expected]
        assert [[(box.transcription, [list(p) for p in box.points]) for box in line.boxes] for line in lines] == [
            [(box["transcription"], box["points"]) for box in boxes] for _, boxes in expected]
        check_inside(lines, {line.file: Image.open(tmp_path / line.file).size for line in lines})
    rewritten = write_det_label_file(tmp_path / "again.txt", entries[:3])
    assert rewritten.read_bytes() == written["test"].read_bytes()


def test_a_demo_dataset_with_an_empty_split_is_refused(tmp_path):
    with pytest.raises(DemoError, match="leave the test split empty"):
        write_demo_dataset(tmp_path, 1, seed=0)
    with pytest.raises(DemoError, match="leave the calibration split empty"):
        write_demo_dataset(tmp_path, 4, seed=0, test_fraction=1.0)
    assert not (tmp_path / "pages").exists()  # refused before drawing anything


def test_demo_pages_command_writes_pages_and_both_label_files(tmp_path, capsys):
    assert main(["demo-pages", str(tmp_path / "demo"), "--pages", "4", "--seed", "3"]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and "4 pages" in said[0] and "2 in" in said[0], said
    for name in (CALIBRATION_FILE, TEST_FILE):
        lines = read_box_label_file(tmp_path / "demo" / name, tmp_path / "demo", name)
        assert len(lines) == 2 and all((tmp_path / "demo" / line.file).is_file() for line in lines)
    assert main(["demo-pages", str(tmp_path / "none"), "--pages", "1"]) == 2  # bad input, named on stderr
    assert "split empty" in capsys.readouterr().err


# ---- PaddleOCR's detector on the pages (Paddle Inference, PaddleOCR's preprocessing, no DB post-processing) -------

def detector(model_dir: Path):
    """PP-OCRv4's detector in Paddle Inference on the CPU, as `predictor` makes the recognizer, but without oneDNN:
    its conv2d_transpose breaks this detector."""
    from paddle import inference

    import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api=0 before paddle loads: the program is legacy format)

    config = inference.Config(str(model_dir / "inference.pdmodel"), str(model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.disable_mkldnn()
    config.set_cpu_math_library_num_threads(4)
    config.disable_glog_info()
    return inference.create_predictor(config)


def text_probabilities(model, bgr: np.ndarray) -> np.ndarray:
    """The detector's text probability map for a page, at the page's size: PaddleOCR's DetResizeForTest (sides
    rounded to multiples of 32; the pages are within its 960 limit), /255, ImageNet normalize, CHW."""
    import cv2

    height, width = bgr.shape[:2]
    resized = cv2.resize(bgr, (max(32, round(width / 32) * 32), max(32, round(height / 32) * 32)))
    pixels = ((resized.astype(np.float32) / 255 - DET_MEAN) / DET_STD).astype(np.float32).transpose(2, 0, 1)
    return cv2.resize(run_predictor(model, pixels[None])[0, 0], (width, height))


def test_pp_ocrv4_detector_sees_text_in_every_box_and_nowhere_else(pages):
    """DB's map marks each line's shrunk kernel (about the middle third of a tight box's height), so the check is
    the mean there (>0.5, as the map's own box score), the map's centre of mass (on the box's centre line), and the
    map far from every box (below DB's 0.3 threshold). A box off by a few pixels fails the first two."""
    import cv2

    root, entries = pages
    model = detector(paddleocr_models().det)
    for path, boxes in entries[:3]:  # a cheque, an invoice and a slip
        probabilities = text_probabilities(model, cv2.imread(str(root / path), cv2.IMREAD_COLOR))
        far = np.ones(probabilities.shape, bool)
        for x0, y0, x1, y1 in rectangles(boxes):
            inset = (x1 - x0) * (y1 - y0) * (1 - SHRINK_RATIO ** 2) / (2 * (x1 - x0 + y1 - y0))
            kernel = probabilities[round(y0 + inset):round(y1 - inset) + 1, round(x0 + inset):round(x1 - inset) + 1]
            assert kernel.mean() > 0.5, (path, (x0, y0, x1, y1), kernel.mean())
            near = probabilities[max(0, y0 - 6):y1 + 6, max(0, x0 - 6):x1 + 6]
            rows = np.arange(max(0, y0 - 6), max(0, y0 - 6) + near.shape[0])
            centre = (near.sum(axis=1) * rows).sum() / near.sum()
            assert abs(centre - (y0 + y1) / 2) < 3, (path, (x0, y0, x1, y1), centre)
            far[max(0, y0 - FAR_PX):y1 + FAR_PX, max(0, x0 - FAR_PX):x1 + FAR_PX] = False
        assert probabilities[far].max() < 0.3, path  # ruled lines, borders and seals are not text


def test_pp_ocrv4_reads_every_box_of_three_pages_as_labelled(pages):
    """The OCR system's reference: each box cropped and read at its own width, as PaddleOCR's system batches its
    crops (48 px high, at least 320 wide), gives back its transcription exactly."""
    import math

    import cv2

    root, entries = pages
    models = paddleocr_models()
    model, classes = predictor(models.rec), models.classes()
    for path, boxes in entries[:3]:
        page = cv2.imread(str(root / path), cv2.IMREAD_COLOR)
        for (x0, y0, x1, y1), box in zip(rectangles(boxes), boxes):
            crop = page[y0:y1, x0:x1]
            shape = (3, 48, max(320, math.ceil(48 * crop.shape[1] / crop.shape[0])))
            read = ctc_greedy(run_predictor(model, resize_norm_pad(crop, shape)[None]), classes)[0]
            assert read == box["transcription"], (path, box)
