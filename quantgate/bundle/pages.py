"""Predicting with a text detector's bundle: each page decoded and prepared exactly as the data stage prepared the
test pages (`page_pixels` with the recorded transforms), run in one runtime, its probability map turned into boxes
by the recorded DB post-processing (`TextDetection.predict`, as the evaluate stage decoded it), and the boxes put
in reading order (`reading_order`, as PaddleOCR's system reads them).

A bundle fed the test pages therefore finds the boxes the evaluate stage stored for them, in reading order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.bundle.engines import load_engine
from quantgate.bundle.predict import DEFAULT_BATCH, BadImage, choose_runtime
from quantgate.bundle.verify import VerifiedBundle
from quantgate.config import TransformsConfig
from quantgate.ocr.crops import reading_order
from quantgate.tasks.db_postprocess import DBParams
from quantgate.tasks.det_resize import det_resize_shape, fits_canvas
from quantgate.tasks.detection import TextDetection


@dataclass(frozen=True)
class TextBox:
    points: tuple[tuple[int, int], ...]  # 4 (x, y) corners in page pixels, clockwise from the top-left
    score: float  # the DB box score: the map's mean probability inside the box


@dataclass(frozen=True)
class PageBoxes:
    image: str
    boxes: tuple[TextBox, ...]  # in reading order


def read_page(path: Path) -> np.ndarray:
    """A page file as an RGB uint8 array [H, W, 3], decoded as the data stage decodes it.

    Raises:
        BadImage: the file is missing or cannot be decoded.
    """
    from PIL import Image

    from quantgate.samples.file_hashes import DECODE_ERRORS

    if not path.is_file():
        raise BadImage(f"page {path} {'is not a file' if path.exists() else 'does not exist'}; pass image files")
    try:
        with Image.open(path) as image:
            image.load()
            return np.asarray(image.convert("RGB"))
    except DECODE_ERRORS as exc:
        raise BadImage(f"page {path} cannot be decoded ({type(exc).__name__}: {exc}); pass a PNG, JPEG or BMP "
                       "file") from exc


def check_page_fits(path: Path, page: np.ndarray, transforms: TransformsConfig) -> None:
    """Refuse a page that the bundle's resize would make larger than the detector's fixed input canvas.

    Raises:
        BadImage: the page does not fit; the message gives its size, the canvas and the largest page that fits.
    """
    height, width = page.shape[:2]
    canvas, limit, limit_type = tuple(transforms.det_canvas), transforms.det_limit_side_len, transforms.det_limit_type
    if fits_canvas(height, width, canvas, limit, limit_type):
        return
    resized = det_resize_shape(height, width, limit, limit_type)
    largest = largest_fitting_page(height, width, canvas, limit, limit_type)
    remake = (f"make a version with data.transforms.det_limit_side_len {min(canvas)} or less (det_limit_type "
              "'max') and bundle that")
    fix = f"scale the page down to at most {largest[0]}x{largest[1]} px first, or {remake}" if largest else \
        f"no page of this shape fits with these settings: {remake}"
    raise BadImage(f"page {path} is {height}x{width} px (height x width); the bundle's preprocessing (limit_side_len "
                   f"{limit}, limit_type {limit_type!r}) resizes it to {resized[0]}x{resized[1]}, larger than the "
                   f"detector's {canvas[0]}x{canvas[1]} input canvas: {fix}")


def largest_fitting_page(height: int, width: int, canvas: tuple[int, int], limit: int,
                         limit_type: str) -> tuple[int, int] | None:
    """The largest (height, width) of this page's shape, scaled down, that fits the canvas once resized; None
    when no scale does (the settings enlarge every page past the canvas)."""
    longer = max(height, width)

    def scaled(side: int) -> tuple[int, int]:
        return max(1, round(height * side / longer)), max(1, round(width * side / longer))

    low, high = 0, longer - 1  # the longest side that fits (0: none); the page itself does not fit
    while low < high:
        middle = (low + high + 1) // 2
        if fits_canvas(*scaled(middle), canvas, limit, limit_type):
            low = middle
        else:
            high = middle - 1
    return scaled(low) if low and fits_canvas(*scaled(low), canvas, limit, limit_type) else None


def load_page(path: Path, transforms: TransformsConfig) -> tuple[np.ndarray, np.ndarray]:
    """A page file as the detector's input [3, canvas H, canvas W] and its geometry [h, w, resized_h, resized_w],
    exactly as the data stage prepares its pages.

    Raises:
        BadImage: the file is missing, cannot be decoded, or does not fit the canvas once resized.
    """
    from quantgate.samples.pages import page_pixels

    page = read_page(path)
    check_page_fits(path, page, transforms)
    return page_pixels(page, transforms)


def detect_pages(bundle: VerifiedBundle, images: Sequence[str], runtime: str | None = None,
                 precision: str = "int8") -> list[PageBoxes]:
    """Each page's text boxes in reading order, with their scores, from `runtime`'s `precision` detector.

    The batch size and thread count are those the evaluate stage ran the models with.

    Raises:
        NotInBundle: the runtime or precision is not one the bundle holds.
        BadImage: a page is missing, cannot be decoded, or is too large for the detector's canvas.
        RuntimeMissing: the runtime's library is not installed.
    """
    runtime = choose_runtime(bundle, runtime, precision)
    record = bundle.preprocessing()
    transforms = TransformsConfig.model_validate(record["transforms"])
    decoder = TextDetection(DBParams(**record["postprocess"]))
    settings = bundle.manifest.get("evaluated_with") or {}
    batch_size, threads = int(settings.get("batch_size") or DEFAULT_BATCH), int(settings.get("threads") or 1)
    engine = load_engine(runtime, bundle.model_files(runtime, precision), precision, threads,
                         (batch_size, *record["input_shape"]))
    found = []
    for start in range(0, len(images), batch_size):
        names = [str(image) for image in images[start:start + batch_size]]
        pixels, geometry = zip(*(load_page(Path(name), transforms) for name in names))
        pages = decoder.predict(np.asarray(engine(np.stack(pixels))), np.stack(geometry))
        found += [PageBoxes(name, in_reading_order(page)) for name, page in zip(names, pages)]
    return found


def in_reading_order(prediction_json: str) -> tuple[TextBox, ...]:
    """A page's prediction (the JSON the evaluate stage stores) as boxes in reading order."""
    boxes = json.loads(str(prediction_json))
    order = reading_order([np.asarray(box["points"], np.float32) for box in boxes])
    return tuple(TextBox(tuple(tuple(int(v) for v in point) for point in boxes[i]["points"]), float(boxes[i]["score"]))
                 for i in order)
