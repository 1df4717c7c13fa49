"""The degraded lines are reproducible, fit the recognizer's input, and are really faded, blurred and compressed."""

from __future__ import annotations

import numpy as np
import pytest

from support.degraded_lines import Degradation, degrade, draw_degradation, render_degraded_lines
from support.ocr_samples import LINE_HEIGHT, MAX_LINE_WIDTH, NoCjkFont, cjk_font, render_financial_lines, render_line


@pytest.fixture(scope="module")
def font():
    try:
        return cjk_font()
    except NoCjkFont as exc:
        pytest.skip(str(exc))


def gray(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("L"), np.float32)


def ink_to_paper(pixels: np.ndarray) -> float:
    """How far the darkest ink is from the paper, in grey levels."""
    return float(np.percentile(pixels, 95) - np.percentile(pixels, 1))


def sharpness(pixels: np.ndarray) -> float:
    """Mean absolute difference between neighbouring pixels along the line: the high-frequency energy."""
    return float(np.abs(np.diff(pixels, axis=1)).mean())


def test_the_same_seed_renders_the_same_files_and_another_seed_others(tmp_path, font):
    first = render_degraded_lines(tmp_path / "a", 8, seed=5, font=font)
    second = render_degraded_lines(tmp_path / "b", 8, seed=5, font=font)
    other = render_degraded_lines(tmp_path / "c", 8, seed=6, font=font)
    assert first == second
    assert [path for path, _ in first] == [f"lines/degraded_5_{index:05d}.png" for index in range(8)]
    assert all((tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes() for path, _ in first)
    assert [text for _, text in other] != [text for _, text in first]
    assert all(not (tmp_path / "c" / path).exists() for path, _ in first)


def test_every_line_fits_the_recognizer_input(tmp_path, font):
    from PIL import Image

    for path, _ in render_degraded_lines(tmp_path, 32, seed=0, font=font):
        width, height = Image.open(tmp_path / path).size
        assert height == LINE_HEIGHT and width <= MAX_LINE_WIDTH, path


def test_degraded_lines_are_longer_fainter_and_softer_than_the_clean_ones(tmp_path, font):
    degraded = render_degraded_lines(tmp_path / "degraded", 32, seed=0, font=font)
    clean = render_financial_lines(tmp_path / "clean", 32, seed=0, font=font)
    assert np.mean([len(text) for _, text in degraded]) > np.mean([len(text) for _, text in clean])
    degraded_pixels = [gray(tmp_path / "degraded" / path) for path, _ in degraded]
    clean_pixels = [gray(tmp_path / "clean" / path) for path, _ in clean]
    assert np.median([ink_to_paper(p) for p in degraded_pixels]) < 0.8 * np.median([ink_to_paper(p) for p in
                                                                                      clean_pixels])
    assert np.median([sharpness(p) for p in degraded_pixels]) < 0.8 * np.median([sharpness(p) for p in clean_pixels])


def test_each_degradation_does_what_it_says_to_one_line(font):
    rng = np.random.default_rng(0)
    line = render_line("金额￥12,345.67", font, rng)
    clean = np.asarray(line.convert("L"), np.float32)

    def apply(**kwargs) -> np.ndarray:
        out = degrade(line, Degradation(**kwargs), np.random.default_rng(1))
        assert out.size == line.size and out.mode == "RGB"
        return np.asarray(out.convert("L"), np.float32)

    assert np.array_equal(apply(), clean)  # the neutral degradation leaves the line alone
    assert ink_to_paper(apply(contrast=0.3)) < 0.4 * ink_to_paper(clean)
    assert sharpness(apply(blur_radius_px=1.5)) < 0.7 * sharpness(clean)
    assert 0 < np.abs(apply(jpeg_quality=15) - clean).mean()
    shadowed = apply(lighting=0.25)
    assert shadowed.mean() < clean.mean() and shadowed.max() <= clean.max()


def test_every_line_gets_at_least_one_degradation():
    rng = np.random.default_rng(0)
    draws = [draw_degradation(rng) for _ in range(500)]
    assert all(d != Degradation() for d in draws)
    assert {d.blur_radius_px > 0 for d in draws} == {d.jpeg_quality is not None for d in draws} == {True, False}
