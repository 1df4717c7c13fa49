"""Training-time augmentation with paddle.vision's functional transforms, seeded per image and epoch.

Each image draws from its own generator, seeded by (data.seed, epoch, row): the same run gives the
same batches whether one process or four DataLoader workers decode them, and every epoch differs.
"""

from __future__ import annotations

import math

import numpy as np
from paddle.vision.transforms import functional as vision
from PIL import Image

from quantgate.config import AugmentConfig, TransformsConfig

ASPECT_RATIOS = (3 / 4, 4 / 3)  # of the random crop, as torchvision's and paddle's RandomResizedCrop
CROP_TRIES = 10


def image_rng(seed: int, epoch: int, row: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, row])


def _random_crop_box(width: int, height: int, scale: tuple[float, float], rng: np.random.Generator):
    """(top, left, height, width) of a crop with a random area share in `scale` and aspect ratio in 3/4..4/3."""
    area = width * height
    for _ in range(CROP_TRIES):
        target = area * rng.uniform(*scale)
        ratio = math.exp(rng.uniform(math.log(ASPECT_RATIOS[0]), math.log(ASPECT_RATIOS[1])))
        crop_w, crop_h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            return int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1)), crop_h, crop_w
    side = min(width, height)  # no fitting draw: the largest centred square
    return (height - side) // 2, (width - side) // 2, side, side


def augmented(image: Image.Image, transforms: TransformsConfig, augment: AugmentConfig, output_hw: tuple[int, int],
              rng: np.random.Generator) -> Image.Image:
    """`image` (decoded, color-converted) randomly changed and brought to `output_hw`, the size the
    deterministic transforms give."""
    if augment.crop_scale is not None:
        top, left, height, width = _random_crop_box(image.width, image.height, augment.crop_scale, rng)
        image = vision.resize(vision.crop(image, top, left, height, width), output_hw)
    else:
        if transforms.resize is not None:
            image = vision.resize(image, transforms.resize)
        if transforms.center_crop is not None:
            image = vision.center_crop(image, transforms.center_crop)
    if augment.horizontal_flip and rng.random() < 0.5:
        image = vision.hflip(image)
    if augment.rotation_degrees:
        image = vision.rotate(image, float(rng.uniform(-augment.rotation_degrees, augment.rotation_degrees)))
    if augment.color_jitter:
        low, high = 1 - augment.color_jitter, 1 + augment.color_jitter
        image = vision.adjust_brightness(image, float(rng.uniform(low, high)))
        image = vision.adjust_contrast(image, float(rng.uniform(low, high)))
        if image.mode == "RGB":
            image = vision.adjust_saturation(image, float(rng.uniform(low, high)))
    return image


def augmentation_record(augment: AugmentConfig, seed: int) -> dict:
    """What the manifest says about augmentation: the settings, and how each image's draw is seeded."""
    return {"enabled": augment.active, **augment.model_dump(mode="json"),
            "seeding": f"numpy default_rng([data.seed={seed}, epoch, row]) per training image"}
