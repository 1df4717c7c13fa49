"""Harder Chinese financial text lines: longer text, then blurred, JPEG-compressed and faded, to benchmark
PP-OCRv4's recognizer (and its INT8 forms) where it no longer reads nearly every line.

    entries = render_degraded_lines(root, 500, seed=2)
    write_label_file(root / "test.txt", entries)      # support.ocr_samples' label file, as for the clean lines

Each line joins two `financial_text` pieces (spaces dropped) when they fit 320 px at the smallest font size,
trying a few second pieces, else keeps one piece; `render_line` draws it as it draws the clean lines. Each line
is then degraded with a draw from `draw_degradation`: low contrast (ink and paper pulled towards each other) with
a shadow across part of the line, a Gaussian blur, and a JPEG re-encoding at a low quality, in that order, as a
faded page is scanned and saved. Everything comes from numpy's default_rng(seed): the same seed and font give
the same files.

Tuning, measured with PP-OCRv4's FP32 recognizer in Paddle Inference (`read_lines`, exact line match) and
WenQuanYi Zen Hei: seed 101, 300 lines, FP32 line accuracy 95.33 % (286 of 300) with BLUR_RADIUS_PX
(0.75, 1.7), JPEG_QUALITY (11, 36), CONTRAST (0.25, 0.52), LIGHTING (0.0, 0.25), APPLY_SHARE 0.75, JOIN_TRIES
3 (seed 103 as a check: 94.00 %). Left undegraded (`degrade` as the identity, which shifts the later texts: they
share the rng), seed 101's 300 lines read 99.33 %. Of the degraded set's 300 lines 31 % join two pieces; they
average 11.7 characters (render_financial_lines' seed 101: 9.9). Of the 14 misread lines, 10 read a thousands
comma as a point or "，", 3 lose or change a date's hyphen, 1 reads 贰 as 武.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from support.ocr_samples import cjk_font, financial_text, render_line

# The strength of each degradation, drawn uniformly from these ranges (tuned as the docstring says).
BLUR_RADIUS_PX = (0.75, 1.7)  # PIL's GaussianBlur radius (its sigma)
JPEG_QUALITY = (11, 36)  # PIL's JPEG quality, re-encoded in memory
CONTRAST = (0.25, 0.52)  # the share of the ink-paper difference that is kept
LIGHTING = (0.0, 0.25)  # the largest darkening of the paper by a shadow across the line, as a share
APPLY_SHARE = 0.75  # each degradation applies to this share of lines (at least one applies to every line)
JOIN_TRIES = 3  # second pieces tried before a line keeps its first piece alone


@dataclass(frozen=True)
class Degradation:
    """What is done to one clean line; a neutral value (0 radius, no quality, contrast 1, lighting 0) skips it."""

    blur_radius_px: float = 0.0
    jpeg_quality: int | None = None
    contrast: float = 1.0
    lighting: float = 0.0


def draw_degradation(rng: np.random.Generator) -> Degradation:
    """A seeded mix: each degradation applies with APPLY_SHARE, at a strength drawn from its range."""
    applies = rng.random(3) < APPLY_SHARE
    if not applies.any():
        applies[rng.integers(3)] = True
    blur, jpeg, fade = applies
    radius = float(rng.uniform(*BLUR_RADIUS_PX))
    quality = int(rng.integers(JPEG_QUALITY[0], JPEG_QUALITY[1] + 1))
    contrast, lighting = float(rng.uniform(*CONTRAST)), float(rng.uniform(*LIGHTING))
    return Degradation(blur_radius_px=radius if blur else 0.0, jpeg_quality=quality if jpeg else None,
                       contrast=contrast if fade else 1.0, lighting=lighting if fade else 0.0)


def degrade(image, degradation: Degradation, rng: np.random.Generator):
    """`image` (a PIL RGB line) faded, lit unevenly, blurred and JPEG re-encoded as `degradation` says."""
    from PIL import Image, ImageFilter

    if degradation.contrast < 1.0 or degradation.lighting > 0.0:
        pixels = np.asarray(image, np.float32)
        gray = pixels.mean(axis=2)
        paper, ink = np.percentile(gray, 95), np.percentile(gray, 1)
        middle = (paper + ink) / 2  # both move towards it: the ink greys, the paper darkens
        pixels = middle + (pixels - middle) * degradation.contrast
        # A shadow darkest at a random point along the line, fading out linearly either side of it.
        width = pixels.shape[1]
        start, reach = int(rng.integers(width)), max(1.0, float(rng.uniform(0.3, 1.0)) * width)
        ramp = np.clip(1 - np.abs(np.arange(width) - start) / reach, 0, 1)
        pixels = pixels * (1 - degradation.lighting * ramp)[None, :, None]
        image = Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8))
    if degradation.blur_radius_px > 0:
        image = image.filter(ImageFilter.GaussianBlur(degradation.blur_radius_px))
    if degradation.jpeg_quality is not None:
        encoded = io.BytesIO()
        image.save(encoded, format="JPEG", quality=degradation.jpeg_quality)
        image = Image.open(io.BytesIO(encoded.getvalue())).convert("RGB")
    return image


def _piece(rng: np.random.Generator) -> str:
    # Without the spaces between digit groups: a third of a character wide, blur and JPEG wipe them out, and the
    # set would measure the spacing convention rather than the reading (quantgate.demo.text's `account` says so).
    return financial_text(rng).replace(" ", "")


def _clean_lines(count: int, font: Path, rng: np.random.Generator):
    made = 0
    while made < count:
        first = _piece(rng)
        for _ in range(JOIN_TRIES):  # a second piece that still fits, if one of a few draws does
            text = first + _piece(rng)
            image = render_line(text, font, rng)
            if image is not None:
                break
        else:
            text, image = first, render_line(first, font, rng)
        if image is not None:
            made += 1
            yield text, image


def render_degraded_lines(out_dir: Path, count: int, seed: int, font: Path | None = None) -> list[tuple[str, str]]:
    """`count` degraded text-line PNGs under out_dir/lines/, the same for the same seed and font:
    [(relative path, text)], as `render_financial_lines` returns them.

    Raises:
        NoCjkFont: `font` is None and no CJK font is installed.
    """
    out_dir, font = Path(out_dir), font or cjk_font()
    (out_dir / "lines").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = []
    for index, (text, image) in enumerate(_clean_lines(count, font, rng)):
        relative = f"lines/degraded_{seed}_{index:05d}.png"
        degrade(image, draw_degradation(rng), rng).save(out_dir / relative)
        entries.append((relative, text))
    return entries
