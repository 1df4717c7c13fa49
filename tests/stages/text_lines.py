"""Tiny text-line datasets in PaddleOCR's recognition layout, written with Pillow, for tests (importable from
tests/stages, like folder_images).

No font is needed: each character is drawn as its own fixed pattern of blocks (dark ink on a light
ground), so a line's pixels follow its label and a recognizer can learn them, though no person could
read them. File names and labels are Chinese, as the OCR teams' data is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

CHINESE = "零壹贰叁肆伍陆柒捌玖元角分"  # the characters of amounts on Chinese cheques
GRID = 5  # each glyph is a GRID x GRID pattern of blocks


@dataclass(frozen=True)
class TextLines:
    """Where a written dataset lies, and the labels it holds (in label-file order)."""

    root: Path
    label_file: Path
    texts: list[str]
    test_label_file: Path | None = None
    test_texts: list[str] = field(default_factory=list)

    def data_config(self, **extra) -> dict:
        """The `data` section of a config reading this dataset (small fractions suit a few dozen lines)."""
        files = {"label_file": str(self.label_file)}
        if self.test_label_file is not None:
            files["test_label_file"] = str(self.test_label_file)
        return {"dataset": "text_lines", "path": str(self.root), **files, "test_fraction": 0.2,
                "calibration_fraction": 0.2, "validation_fraction": 0.1, **extra}


def glyph(character: str, height: int) -> np.ndarray:
    """The fixed block pattern of `character`, True for ink, [height, 3/4 height]."""
    pattern = np.random.default_rng(ord(character)).random((GRID, GRID)) < 0.45
    pattern[:, 0] |= pattern.sum(axis=1) == 0  # no empty row: every glyph has ink at every height band
    block_h, block_w = height / GRID, height * 3 // 4 / GRID
    rows = (np.arange(height) / block_h).astype(int).clip(0, GRID - 1)
    cols = (np.arange(height * 3 // 4) / block_w).astype(int).clip(0, GRID - 1)
    return pattern[rows][:, cols]


def line_image(text: str, height: int = 32, rng: np.random.Generator | None = None) -> Image.Image:
    """`text` drawn as glyphs with 2-pixel gaps and margins, dark ink on a light, slightly noisy ground."""
    rng = rng or np.random.default_rng(0)
    width = height * 3 // 4
    canvas = np.full((height + 4, 4 + len(text) * (width + 2)), 235.0)
    for position, character in enumerate(text):
        left = 2 + position * (width + 2)
        canvas[2:2 + height, left:left + width][glyph(character, height)] = 20.0
    canvas += rng.normal(0, 6, canvas.shape)
    return Image.fromarray(canvas.clip(0, 255).astype(np.uint8), "L")


def _write(root: Path, folder: str, name: str, count: int, characters: str, lengths: tuple[int, int],
           height: int, rng: np.random.Generator) -> tuple[Path, list[str]]:
    (root / folder).mkdir(parents=True, exist_ok=True)
    lines, texts = [], []
    for index in range(count):
        text = "".join(rng.choice(list(characters), size=int(rng.integers(lengths[0], lengths[1] + 1))))
        image = line_image(text, height + int(rng.integers(-4, 5)), rng)
        if index % 5 == 4:
            image = image.convert("RGB")  # an RGB file among grayscale ones
        suffix = ("png", "png", "jpg", "bmp")[index % 4]
        relative = f"{folder}/行_{index:03d}.{suffix}"
        image.save(root / relative, format={"jpg": "JPEG"}.get(suffix, suffix.upper()), quality=95)
        lines.append(f"{relative}\t{text}\n")
        texts.append(text)
    label_file = root / name
    label_file.write_text("".join(lines), encoding="utf-8")
    return label_file, texts


def write_text_lines(root: Path, lines: int = 40, characters: str = CHINESE, lengths: tuple[int, int] = (2, 6),
                     height: int = 32, test_lines: int = 0, seed: int = 0) -> TextLines:
    """A PaddleOCR-layout dataset under `root`: images in `图片/` (non-ASCII names, PNG, JPEG and BMP, grey and
    RGB, heights varying by a few pixels), `标签.txt` listing `图片/行_000.png<TAB>label` lines; with
    `test_lines`, a separate test set in `测试/` listed by `测试标签.txt`. Every character of `characters`
    appears in many lines, so any seeded split leaves all of them in the training lines."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    label_file, texts = _write(root, "图片", "标签.txt", lines, characters, lengths, height, rng)
    if not test_lines:
        return TextLines(root, label_file, texts)
    test_file, test_texts = _write(root, "测试", "测试标签.txt", test_lines, characters, lengths, height, rng)
    return TextLines(root, label_file, texts, test_file, test_texts)


def write_dictionary(path: Path, characters: str) -> Path:
    """A PaddleOCR character dictionary: one character per line."""
    Path(path).write_text("".join(f"{character}\n" for character in characters), encoding="utf-8")
    return Path(path)
