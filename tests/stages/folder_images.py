"""Tiny image-classification folders written with Pillow, for tests (importable from tests/stages)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

COLORS = ((220, 30, 30), (30, 200, 40), (40, 60, 230), (200, 200, 30))


def write_image_folder(root: Path, classes: int = 3, per_class: int = 6, size: tuple[int, int] = (40, 36),
                       formats: tuple[str, ...] = ("png", "jpeg", "bmp"), seed: int = 0) -> Path:
    """One sub-folder per class; each class a noisy colour, files in mixed formats, modes and sizes."""
    rng = np.random.RandomState(seed)
    for label in range(classes):
        folder = Path(root) / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            height, width = size[0] + index % 3, size[1] + index % 2  # not all the same size
            pixels = np.clip(np.asarray(COLORS[label % len(COLORS)]) + rng.randint(-25, 25, (height, width, 3)), 0, 255)
            image = Image.fromarray(pixels.astype(np.uint8), "RGB")
            if index % 4 == 3:
                image = image.convert("L")  # a grayscale file among RGB ones
            fmt = formats[index % len(formats)]
            image.save(folder / f"img_{index}.{'jpg' if fmt == 'jpeg' else fmt}", format=fmt.upper())
    return Path(root)
