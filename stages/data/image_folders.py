"""Image-classification folders (one sub-folder per class, as paddle.vision.datasets.ImageFolder reads them).

Every image is decoded and pre-processed once, here, with the declared deterministic transforms;
the data stage stores the resulting arrays, so training, calibration and evaluation see the same
pixels and the manifest says exactly what the deployed model expects as input.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from paddle.vision.transforms import functional as vision
from PIL import Image, UnidentifiedImageError

from quantgate.config import TransformsConfig
from quantgate.stages.data.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
PIXEL_MAX = 255.0


@dataclass(frozen=True)
class ImageFolder:
    """The decoded, pre-processed images of one folder, with what identifies them."""

    images: np.ndarray  # float32 NCHW, normalized
    labels: np.ndarray  # int64 class indices, by sorted class name
    classes: tuple[str, ...]
    files: tuple[str, ...]  # paths relative to the folder, in the order of `images`
    content_sha256: str  # sha256 over every file's relative path and bytes


def find_images(root: Path) -> tuple[tuple[str, ...], list[tuple[Path, int]]]:
    """Class names (sorted sub-folder names) and every image file with its class index.

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
        files = sorted(
            path for path in (root / name).rglob("*")
            if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES
            and not any(part.startswith(".") for part in path.relative_to(root).parts)  # .ipynb_checkpoints etc.
        )
        if not files:
            raise DataError(
                f"class {name!r} in {root} has no images ({'/'.join(IMAGE_SUFFIXES)}); add images or remove the folder"
            )
        found.extend((path, index) for path in files)
    return classes, found


def _decode(path: Path, color: str) -> Image.Image:
    """Open and fully decode one image, so a truncated file fails here and not in the middle of training."""
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB" if color == "rgb" else "L")
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise DataError(f"cannot read image {path}: {exc}; replace or remove the file") from exc


def preprocess(image: Image.Image, transforms: TransformsConfig) -> np.ndarray:
    """resize → center crop → scale to [0, 1] → (x - mean) / std, as float32 CHW."""
    if transforms.resize is not None:
        image = vision.resize(image, transforms.resize)
    if transforms.center_crop is not None:
        image = vision.center_crop(image, transforms.center_crop)
    pixels = np.asarray(image, dtype=np.float32) / PIXEL_MAX
    pixels = pixels[None, :, :] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    mean = np.asarray(transforms.mean, dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(transforms.std, dtype=np.float32).reshape(-1, 1, 1)
    return (pixels - mean) / std


def load_image_folder(root: Path, transforms: TransformsConfig) -> ImageFolder:
    """Decode and pre-process every image under `root`.

    Raises:
        DataError: see `find_images`; an image cannot be decoded (the file is named); or the images
            end up with different sizes (set data.transforms.resize / center_crop).
    """
    root = Path(root).expanduser()
    classes, found = find_images(root)
    digest = hashlib.sha256()
    arrays, labels, names = [], [], []
    for path, label in found:
        relative = path.relative_to(root).as_posix()
        digest.update(relative.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
        arrays.append(preprocess(_decode(path, transforms.color), transforms))
        labels.append(label)
        names.append(relative)
    shapes = sorted({array.shape for array in arrays})
    if len(shapes) > 1:
        raise DataError(
            f"images in {root} have different sizes after pre-processing ({', '.join(map(str, shapes[:4]))}); "
            "set data.transforms.resize and/or data.transforms.center_crop to give them one size"
        )
    return ImageFolder(
        images=np.stack(arrays).astype(np.float32),
        labels=np.asarray(labels, dtype=np.int64),
        classes=classes,
        files=tuple(names),
        content_sha256=digest.hexdigest(),
    )


def preprocessing_record(transforms: TransformsConfig, input_shape: tuple[int, ...]) -> dict:
    """What a deployment must do to an image before feeding the model, in order."""
    return {
        "steps": [
            f"decode and convert to {'RGB' if transforms.color == 'rgb' else 'grayscale (L)'}",
            *([f"resize {transforms.resize} (bilinear; one number = shorter side)"] if transforms.resize else []),
            *([f"center crop {transforms.center_crop}"] if transforms.center_crop else []),
            "scale pixels to [0, 1] (divide by 255)",
            f"normalize (x - mean) / std with mean={list(transforms.mean)} std={list(transforms.std)}",
            "layout NCHW float32",
        ],
        "transforms": transforms.model_dump(mode="json"),
        "input_shape": list(input_shape),
    }
