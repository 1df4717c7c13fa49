"""The rendered OCR test data is reproducible, inside PaddleOCR's dictionary, and readable by PaddleOCR's models."""

from __future__ import annotations

import numpy as np
import pytest

from support.ocr_samples import (
    LINE_HEIGHT,
    MAX_LINE_WIDTH,
    financial_text,
    missing_characters,
    paddleocr_models,
    read_directions,
    read_lines,
    render_direction_lines,
    render_financial_lines,
    upper_amount,
    write_label_file,
)


@pytest.fixture(scope="module")
def models():
    return paddleocr_models()


def test_the_same_seed_renders_the_same_lines_byte_for_byte(tmp_path):
    first = render_financial_lines(tmp_path / "a", 12, seed=3)
    second = render_financial_lines(tmp_path / "b", 12, seed=3)
    assert first == second
    assert all((tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes() for path, _ in first)
    assert [text for _, text in render_financial_lines(tmp_path / "c", 12, seed=4)] != [text for _, text in first]


def test_every_line_is_in_the_recognizer_dictionary(models):
    rng = np.random.default_rng(0)
    texts = [financial_text(rng) for _ in range(5000)]
    assert missing_characters(texts, models.dictionary()) == set()
    assert len(models.classes()) == 6625  # blank + 6,623 characters + space: the recognizer's output width


def test_every_line_fits_the_recognizer_input(tmp_path):
    from PIL import Image

    for path, _ in render_financial_lines(tmp_path, 64, seed=0):
        width, height = Image.open(tmp_path / path).size
        assert height == LINE_HEIGHT and width <= MAX_LINE_WIDTH, path


def test_label_file_is_paddleocr_format(tmp_path):
    entries = render_financial_lines(tmp_path, 4, seed=1)
    label_file = write_label_file(tmp_path / "labels.txt", entries)
    rows = [line.split("\t") for line in label_file.read_text(encoding="utf-8").splitlines()]
    assert [tuple(row) for row in rows] == entries
    assert all((tmp_path / path).is_file() for path, _ in rows)


def test_amounts_in_capitals_read_as_on_a_cheque():
    assert upper_amount(12000) == "壹万贰仟元整"
    assert upper_amount(100200) == "壹拾万零贰佰元整"
    assert upper_amount(2005) == "贰仟零伍元整"


def test_pp_ocrv4_reads_every_rendered_line(tmp_path, models):
    entries = render_financial_lines(tmp_path, 16, seed=0)
    assert read_lines(models, [tmp_path / path for path, _ in entries]) == [text for _, text in entries]


def test_direction_classifier_tells_upright_from_upside_down_lines(tmp_path, models):
    folders = render_direction_lines(tmp_path, 8, seed=0)
    assert sorted(path.parent.name for paths in folders.values() for path in paths) == ["0"] * 8 + ["180"] * 8
    assert read_directions(models, folders["0"] + folders["180"]) == ["0"] * 8 + ["180"] * 8
