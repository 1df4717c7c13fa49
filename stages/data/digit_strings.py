"""The built-in text lines: strings of scikit-learn's real handwritten digits, like the amounts on cheques.

The 1,797 source digit images are split first (seeded, stratified by digit), so each belongs to one
split only; the lines of a split are then composed from that split's images alone, reusing them.
Each line is rendered at `rec_image_shape`: every digit scaled (bilinear, PIL) to height H and the
width `data_config.digit_layout` gives, small random gaps, padded on the right with the dark
background to W. The ink convention is load_digits's: bright ink on a dark ground, levels / 16.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

from quantgate.config import DataConfig
from quantgate.data_config import digit_layout
from quantgate.samples.errors import BadTextLines
from quantgate.samples.text_labels import read_dictionary
from quantgate.samples.text_reading import normalized
from quantgate.stages.data.stratify import SPLIT_NAMES, split_indices
from quantgate.tasks.text import encode

DIGITS = tuple("0123456789")
BACKGROUND_NOTE = "0 (the dark background: digit_strings are bright ink on a dark ground, as scikit-learn's digits; " \
                  "invert dark-on-light scans first)"


def line_counts(config: DataConfig) -> dict[str, int]:
    """How many of `data.digit_strings.lines` each split gets, by the split fractions (the rest trains)."""
    total = config.digit_strings.lines
    counts = {name: round(total * getattr(config, f"{name}_fraction")) for name in SPLIT_NAMES[1:]}
    return {"train": total - sum(counts.values()), **counts}


def _scaled_digits(images: np.ndarray, height: int, digit_width: int) -> np.ndarray:
    """Every 8x8 digit (levels 0..16) as a [height, digit_width] image in [0, 1], bilinear."""
    size = (digit_width, height)
    scaled = [np.asarray(Image.fromarray(image / 16.0, "F").resize(size, Image.BILINEAR)) for image in
              images.astype(np.float32)]
    return np.clip(np.stack(scaled), 0.0, 1.0).astype(np.float32)


def _compose(pool: np.ndarray, digits: np.ndarray, labels: np.ndarray, count: int, config: DataConfig,
             rng: np.random.Generator):
    """`count` lines of one split from its source images `pool`: pixels [N, H, W], texts, source indices."""
    _, height, width = config.transforms.rec_image_shape
    settings = config.digit_strings
    digit_width, gap = digit_layout(config.transforms.rec_image_shape, settings.max_digits)
    pixels = np.zeros((count, height, width), np.float32)
    sources = np.full((count, settings.max_digits), -1, np.int64)
    texts = []
    for line in range(count):
        length = int(rng.integers(settings.min_digits, settings.max_digits + 1))
        chosen = rng.choice(pool, size=length)
        x = int(rng.integers(0, gap + 1))  # a small left margin, then gaps: the longest line still fits W
        for position, source in enumerate(chosen):
            pixels[line, :, x:x + digit_width] = digits[source]
            x += digit_width + int(rng.integers(0, gap + 1))
        sources[line, :length] = chosen
        texts.append("".join(str(labels[source]) for source in chosen))
    return pixels, texts, sources


def _characters(config: DataConfig) -> tuple[str, ...]:
    """The digits, or data.character_dict's order when given (it must hold every digit).

    Raises:
        BadTextLines: the dictionary is unusable or misses a digit.
    """
    if not config.character_dict:
        return DIGITS
    characters = read_dictionary(Path(config.character_dict).expanduser())
    missing = [digit for digit in DIGITS if digit not in characters]
    if missing:
        raise BadTextLines(f"data.character_dict {config.character_dict} misses the digit(s) {', '.join(missing)}; "
                           "add them, or remove data.character_dict to use 0-9")
    return characters


def make_digit_strings(config: DataConfig) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """The split arrays (x_, y_, text_, index_, sources_<split>) and the dictionary; deterministic in the config.

    Raises:
        BadTextLines: data.character_dict is unusable or misses a digit.
        DataError: a split of the source digits cannot hold every digit.
    """
    characters = _characters(config)
    digits = load_digits()
    labels = digits.target.astype(np.int64)
    channels, height, _ = config.transforms.rec_image_shape
    digit_width, _ = digit_layout(config.transforms.rec_image_shape, config.digit_strings.max_digits)
    scaled = _scaled_digits(digits.images, height, digit_width)
    source_splits = split_indices(labels, config)  # each source image in one split only
    counts, index = line_counts(config), {character: position + 1 for position, character in enumerate(characters)}
    arrays, first = {}, 0
    for number, name in enumerate(SPLIT_NAMES):
        pixels, texts, sources = _compose(source_splits[name], scaled, labels, counts[name], config,
                                          np.random.default_rng([config.seed, number]))
        arrays[f"x_{name}"] = normalized(np.repeat(pixels[:, None], channels, axis=1), config.transforms)
        arrays[f"text_{name}"] = np.asarray(texts, dtype=f"<U{config.digit_strings.max_digits}")
        arrays[f"sources_{name}"] = sources
        arrays[f"index_{name}"] = np.arange(first, first + counts[name], dtype=np.int64)
        first += counts[name]
    length = max(len(text) for name in SPLIT_NAMES for text in arrays[f"text_{name}"])
    for name in SPLIT_NAMES:
        arrays[f"y_{name}"] = np.stack([encode(text, index, length) for text in arrays[f"text_{name}"]]) \
            if counts[name] else np.zeros((0, length), np.int64)
    return arrays, characters
