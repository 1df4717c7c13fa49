"""Reading text-line images: resize to the recognizer's height keeping the aspect ratio, pad on the right.

The same steps run for training, calibration, evaluation and (as recorded in the data manifest) a
deployment: convert to grayscale (C 1) or RGB (C 3); resize to height H with the width scaled alike,
rounded up, and never past W (a wider line is squeezed to W, allowed only by `data.too_wide: squeeze`);
scale to [0, 1]; pad on the right up to W with the line's background, the median of its last column;
normalize with the transforms' mean and std. A label becomes dictionary ids padded with 0, the CTC blank.
"""

from __future__ import annotations

import numpy as np
from paddle.vision.transforms import functional as vision
from PIL import Image

from quantgate.config import AugmentConfig, TransformsConfig
from quantgate.samples.augment import image_rng
from quantgate.samples.file_hashes import DECODE_ERRORS
from quantgate.samples.file_table import FileRow
from quantgate.samples.recorded_image import FILE_UNREADABLE, READ_OK, RecordedImages, read_recorded
from quantgate.tasks.text import encode

PIXEL_MAX = 255.0


def resized_width(width: int, height: int, target_height: int) -> int:
    """The width of a `width` x `height` image resized to `target_height` with its aspect ratio, rounded up
    (as PaddleOCR's recognizer resize), at least 1."""
    return max(1, -(-target_height * width // height))


def normalized(pixels: np.ndarray, transforms: TransformsConfig) -> np.ndarray:
    """(pixels - mean) / std per channel, float32 CHW."""
    mean = np.asarray(transforms.mean, dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(transforms.std, dtype=np.float32).reshape(-1, 1, 1)
    return ((pixels - mean) / std).astype(np.float32)


def line_pixels(image: Image.Image, shape: tuple[int, int, int], transforms: TransformsConfig) -> np.ndarray:
    """A decoded line image as the recognizer's input, float32 [C, H, W] (see the module docstring)."""
    channels, height, width = shape
    image = image.convert("L" if channels == 1 else "RGB")
    resized = min(width, resized_width(image.width, image.height, height))
    pixels = np.asarray(image.resize((resized, height), Image.BILINEAR), dtype=np.float32) / PIXEL_MAX
    pixels = pixels[None, :, :] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    if transforms.color == "bgr":  # models trained on OpenCV decodes (PaddleOCR) read blue first
        pixels = pixels[::-1]
    if transforms.line_padding == "zero":  # PaddleOCR's resize_norm_img: normalize the line, then pad with 0
        canvas = np.zeros((channels, height, width), np.float32)
        canvas[:, :, :resized] = normalized(pixels, transforms)
        return canvas
    canvas = np.empty((channels, height, width), np.float32)
    canvas[:] = np.median(pixels[:, :, -1], axis=1)[:, None, None]
    canvas[:, :, :resized] = pixels
    return normalized(canvas, transforms)


def _background(image: Image.Image) -> int | tuple[int, ...]:
    """The median colour of the image's last column: what a rotation fills its corners with."""
    column = np.asarray(image)[:, -1]
    value = np.median(column, axis=0).astype(np.uint8)
    return int(value) if value.ndim == 0 else tuple(int(v) for v in value)


def augmented_line(image: Image.Image, augment: AugmentConfig, rng: np.random.Generator) -> Image.Image:
    """A training line randomly rotated (corners filled with its background) and its brightness and contrast
    changed; never flipped or cropped (the config refuses those for text)."""
    if augment.rotation_degrees:
        angle = float(rng.uniform(-augment.rotation_degrees, augment.rotation_degrees))
        image = image.rotate(angle, resample=Image.BILINEAR, fillcolor=_background(image))
    if augment.color_jitter:
        low, high = 1 - augment.color_jitter, 1 + augment.color_jitter
        image = vision.adjust_brightness(image, float(rng.uniform(low, high)))
        image = vision.adjust_contrast(image, float(rng.uniform(low, high)))
    return image


class TextLineSplit(RecordedImages):
    """One split's line images: item `i` is (pixels float32 [C, H, W], ids int64 [L], i, status), as
    `reading.FileSplit`'s items; a changed or undecodable file gives zeros and a status instead of raising."""

    def __init__(self, rows: list[FileRow], roots: dict[str, str], transforms: TransformsConfig,
                 characters: tuple[str, ...], max_text_length: int, augment: AugmentConfig | None = None,
                 seed: int = 0, epoch: int = 0):
        super().__init__(rows, roots)
        self.transforms, self.input_shape = transforms, tuple(transforms.rec_image_shape)
        self.index = {character: position + 1 for position, character in enumerate(characters)}
        self.length, self.augment, self.seed, self.epoch = max_text_length, augment, seed, epoch

    def prepare(self, index: int):
        row = self.rows[index]
        image = read_recorded(self.path(index), row, "L" if self.input_shape[0] == 1 else "RGB")
        if isinstance(image, int):
            return self._failed(index, image)
        try:
            if self.augment is not None:
                image = augmented_line(image, self.augment, image_rng(self.seed, self.epoch, index))
            pixels = line_pixels(image, self.input_shape, self.transforms)
        except DECODE_ERRORS:  # raised here, it would stall paddle's DataLoader instead of reaching the caller
            return self._failed(index, FILE_UNREADABLE)
        return pixels, encode(row.label_name, self.index, self.length), np.int64(index), np.int8(READ_OK)

    def _failed(self, index: int, status: int):
        return (np.zeros(self.input_shape, np.float32), np.zeros(self.length, np.int64), np.int64(index),
                np.int8(status))


def text_preprocessing_record(transforms: TransformsConfig, background: str) -> dict:
    """What a deployment must do to a line image before feeding the recognizer, in order."""
    channels, height, width = transforms.rec_image_shape
    normalize = f"normalize (x - mean) / std with mean={list(transforms.mean)} std={list(transforms.std)}"
    pad = [normalize, f"pad on the right to width {width} with zeros"] if transforms.line_padding == "zero" else \
        [f"pad on the right to width {width} with {background}", normalize]
    return {
        "steps": [
            f"decode and convert to {'grayscale (L)' if channels == 1 else transforms.color.upper()}",
            f"resize to height {height} keeping the aspect ratio: width ceil({height} * w / h), at most {width} "
            "(bilinear, PIL)",
            "scale pixels to [0, 1] (divide by 255)",
            *pad,
            "layout NCHW float32",
            "decode the [N, T, C] output greedily: argmax per step, merge repeats, drop index 0 (the CTC blank); "
            "index i > 0 is line i of characters.txt",
        ],
        "transforms": transforms.model_dump(mode="json"),
        "input_shape": [channels, height, width],
    }
