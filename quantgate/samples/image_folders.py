"""Image-classification folders (one sub-folder per class, as paddle.vision.datasets.ImageFolder reads them).

The files are found here and pre-processed, one at a time, when a stage reads them (`reading.py`),
with the declared deterministic transforms: training, calibration and evaluation see the same pixels,
and the manifest says exactly what the deployed model expects as input.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from paddle.vision.transforms import functional as vision
from PIL import Image

from quantgate.config import TransformsConfig
from quantgate.samples.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
PIXEL_MAX = 255.0


def find_images(root: Path) -> tuple[tuple[str, ...], list[tuple[str, int]]]:
    """Class names (sorted sub-folder names) and every image file (its path as a string) with its class index.

    Raises:
        DataError: the folder is missing, has no class sub-folders, or a class holds no images.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist or is not a folder; set data.path / data.test_path")
    classes = tuple(sorted(entry.name for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith(".")))
    if not classes:
        raise DataError(
            f"image folder {root} has no class sub-folders; put each class's images in its own sub-folder "
            f"(e.g. {root}/cat/1.png, {root}/dog/2.jpg)"
        )
    found = []
    for index, name in enumerate(classes):
        files = sorted(_image_files(str(root / name)))
        if not files:
            raise DataError(
                f"class {name!r} in {root} has no images ({'/'.join(IMAGE_SUFFIXES)}); add images or remove the folder"
            )
        found.extend((path, index) for path in files)
    return classes, found


def _image_files(folder: str) -> list[str]:
    """Image files under `folder`, at any depth, skipping hidden files and folders (.ipynb_checkpoints etc.).
    Strings from os.walk, not Path objects from Path.rglob with a stat per file: a rescan of a large folder
    spends most of its time here."""
    found = []
    for parent, folders, names in os.walk(folder):
        folders[:] = [entry for entry in folders if not entry.startswith(".")]
        found.extend(os.path.join(parent, entry) for entry in names
                     if not entry.startswith(".") and os.path.splitext(entry)[1].lower() in IMAGE_SUFFIXES)
    return found


def preprocess(image: Image.Image, transforms: TransformsConfig) -> np.ndarray:
    """resize → center crop → scale to [0, 1] → (x - mean) / std, as float32 CHW (BGR when asked); with
    `resize_pad`, a text line's resize-and-pad instead (`text_reading.line_pixels`)."""
    if transforms.resize_pad is not None:
        from quantgate.samples.text_reading import line_pixels  # text_reading imports this module's neighbours

        return line_pixels(image, (1 if transforms.color == "grayscale" else 3, *transforms.resize_pad), transforms)
    if transforms.resize is not None:
        image = vision.resize(image, transforms.resize)
    if transforms.center_crop is not None:
        image = vision.center_crop(image, transforms.center_crop)
    pixels = np.asarray(image, dtype=np.float32) / PIXEL_MAX
    pixels = pixels[None, :, :] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    if transforms.color == "bgr":  # models trained on OpenCV decodes read blue first
        pixels = pixels[::-1]
    mean = np.asarray(transforms.mean, dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(transforms.std, dtype=np.float32).reshape(-1, 1, 1)
    return (pixels - mean) / std


def output_shape(width: int, height: int, transforms: TransformsConfig) -> tuple[int, ...]:
    """The (C, H, W) an image of this size has after `transforms`: found by running a blank image of
    that size through `preprocess`, so it is exactly what reading will give."""
    blank = Image.new("L" if transforms.color == "grayscale" else "RGB", (width, height))
    return tuple(preprocess(blank, transforms).shape)


def preprocessing_record(transforms: TransformsConfig, input_shape: tuple[int, ...]) -> dict:
    """What a deployment must do to an image before feeding the model, in order."""
    if transforms.resize_pad is not None:
        from quantgate.samples.text_reading import text_preprocessing_record

        line = transforms.model_copy(update={"rec_image_shape": tuple(input_shape)})
        record = text_preprocessing_record(line, "the median of the resized image's last pixel column")
        record["steps"] = record["steps"][:-1]  # the last step decodes CTC output; a classifier takes argmax
        record["transforms"] = transforms.model_dump(mode="json")
        return record
    return {
        "steps": [
            f"decode and convert to {'grayscale (L)' if transforms.color == 'grayscale' else transforms.color.upper()}",
            *([f"resize {transforms.resize} (bilinear; one number = shorter side)"] if transforms.resize else []),
            *([f"center crop {transforms.center_crop}"] if transforms.center_crop else []),
            "scale pixels to [0, 1] (divide by 255)",
            f"normalize (x - mean) / std with mean={list(transforms.mean)} std={list(transforms.std)}",
            "layout NCHW float32",
        ],
        "transforms": transforms.model_dump(mode="json"),
        "input_shape": list(input_shape),
    }
