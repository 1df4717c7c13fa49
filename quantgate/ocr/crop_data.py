"""A recognizer's data made the way the OCR system makes its lines: each labelled box of a page cut by crops.py.

The system feeds its recognizer straightened crops of page boxes (crop_line), resized to the recognizer's
height and padded to its width (line_pixels). A recognizer calibrated and judged on rendered single lines sees
other pixels: tighter margins, no perspective warp, other widths. Here each labelled box of PaddleOCR detection
pages is cut exactly as the system cuts a box, and the crop is written losslessly as it came out of the cut, with a
PaddleOCR recognition label file (`crops/page/003.png<TAB>text`). The text_recognition data stage then resizes
and pads each crop with the same line_pixels the system runs, at whatever `rec_image_shape` the recognizer is
gated at, so one crops folder serves every width and what calibrates the recognizer is, array for array, what
the system feeds it for that box.

Regions nobody can read ("###", "*") and empty transcriptions are skipped and counted, not written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

from quantgate.errors import BadInput, clipped
from quantgate.ocr.crops import crop_line, crop_size, reading_order, rec_width
from quantgate.tasks.det_metrics import IGNORED_TRANSCRIPTIONS

CROPS_FOLDER = "crops"
SHOWN_PROBLEMS = 5


class BadPageLabels(BadInput):
    """A detection label file cannot be turned into line crops (the message names the lines and the fix)."""


@dataclass(frozen=True)
class LabelledPage:
    """One page of a detection label file: its path relative to the root and its readable boxes in reading
    order, each [4, 2] float32 page pixels with its text."""

    file: str
    boxes: tuple[tuple[np.ndarray, str], ...]
    skipped: int  # regions nobody can read, or with no text


@dataclass(frozen=True)
class CropSummary:
    """What one label file became: its crops' label file, how many crops, skipped regions and crops that a
    recognizer of the given width squeezes (None when no width was given)."""

    label_file: Path
    crops: int
    pages: int
    skipped: int
    squeezed: int | None


def _points(value: object) -> np.ndarray:
    """The box's corners as float64 [K, 2], or an empty array when they are not numbers in pairs."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):  # ragged lists, strings, None: named as "not 4 corners" by the caller
        return np.zeros((0,), np.float64)


def _page_boxes(entries: object, where: str) -> tuple[list[tuple[np.ndarray, str]], int, list[str]]:
    boxes, skipped, problems = [], 0, []
    if not isinstance(entries, list):
        return [], 0, [f"{where}: the label is not a JSON list of boxes"]
    for number, entry in enumerate(entries, start=1):
        text = entry.get("transcription") if isinstance(entry, dict) else None
        points = _points(entry.get("points") if isinstance(entry, dict) else None)
        if not isinstance(text, str) or text in IGNORED_TRANSCRIPTIONS or not text.strip():
            skipped += 1
        elif points.shape != (4, 2) or not np.all(np.isfinite(points)):
            problems.append(f"{where} box {number}: points {clipped(json.dumps(entry.get('points')), 60)} are not "
                            "4 [x, y] corners (the system cuts 4-corner boxes; give lines as quadrilaterals)")
        elif "\t" in text or "\n" in text or "\r" in text:
            problems.append(f"{where} box {number}: the text {text!r} holds a tab or line break, which a "
                            "recognition label line cannot carry")
        elif min(crop_size(points)) < 1:
            problems.append(f"{where} box {number}: {points.tolist()} is under a pixel wide or high")
        else:
            boxes.append((points.astype(np.float32), text))
    return boxes, skipped, problems


def labelled_pages(label_file: Path) -> list[LabelledPage]:
    """The pages of a PaddleOCR detection label file (`page.png<TAB>[{"transcription", "points"}, ...]`), each
    with its readable boxes in the system's reading order.

    Raises:
        BadPageLabels: the file is missing, or lines are not `path<TAB>JSON list` of 4-corner boxes whose text a
            recognition label can hold (every problem named, the first few shown).
    """
    try:
        lines = Path(label_file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadPageLabels(f"cannot read the detection label file {label_file} ({exc}); pass a UTF-8 file of "
                            "`page.png<TAB>boxes JSON` lines, as `quantgate demo-pages` writes") from exc
    pages, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{label_file}:{number}"
        file, tab, label = line.partition("\t")
        if not tab:
            problems.append(f"{where}: no tab between the page and its label")
            continue
        try:
            entries = json.loads(label)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: the label is not JSON ({exc.msg})")
            continue
        boxes, skipped, found = _page_boxes(entries, where)
        problems += found
        order = reading_order([points for points, _ in boxes])
        pages.append(LabelledPage(file, tuple(boxes[i] for i in order), skipped))
    if problems:
        shown = "; ".join(problems[:SHOWN_PROBLEMS])
        more = f" (and {len(problems) - SHOWN_PROBLEMS} more)" if len(problems) > SHOWN_PROBLEMS else ""
        raise BadPageLabels(f"{len(problems)} problem(s) in {label_file}: {shown}{more}")
    return pages


def page_crops(page_rgb: np.ndarray, page: LabelledPage) -> list[np.ndarray]:
    """Each labelled box of `page` cut from its RGB pixels as the system cuts a detected box."""
    return [crop_line(page_rgb, points) for points, _ in page.boxes]


def _crop_name(page_file: str, index: int) -> str:
    """crops/<the page's path without its suffix>/<index>.png: unique per box, and it says where the line is."""
    return str(PurePosixPath(CROPS_FOLDER, PurePosixPath(page_file).with_suffix(""), f"{index:03d}.png"))


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def write_crop_dataset(root: Path, label_file: Path, out: Path,
                       rec_shape: tuple[int, int, int] | None = None) -> CropSummary:
    """The crops of every labelled box of `label_file`'s pages (relative to `root`) under out/crops/, and
    out/<label_file's name> listing them as `crops/page/003.png<TAB>text`, in page order and reading order.

    `rec_shape` (C, H, W), when given, only counts the crops that recognizer squeezes (wider than W at height H).

    Raises:
        BadPageLabels: the label file is unusable (see labelled_pages), a page is missing or does not decode, or
            out already holds that label file (crops are never written over a dataset: pick an empty folder).
    """
    root, out = Path(root), Path(out)
    written = out / Path(label_file).name
    if written.exists():
        raise BadPageLabels(f"{written} already exists; write the crops into an empty folder or delete it first")
    pages = labelled_pages(label_file)
    entries, squeezed = [], 0
    for page in pages:
        try:
            with Image.open(root / page.file) as image:
                rgb = np.asarray(image.convert("RGB"))  # as the system's data stage reads a page
        except (OSError, ValueError) as exc:
            raise BadPageLabels(f"page {page.file} of {label_file} cannot be read under {root} ({exc}); pass the "
                                "pages' root (data.path of the detection config) or fix the label file") from exc
        for index, (crop, (_, text)) in enumerate(zip(page_crops(rgb, page), page.boxes)):
            name = _crop_name(page.file, index)
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(crop).save(out / name)  # PNG: lossless, so the data stage reads the cut's very pixels
            entries.append(f"{name}\t{text}\n")
            if rec_shape is not None:
                squeezed += rec_width(crop.shape[0], crop.shape[1], rec_shape)[1]
    if not entries:
        raise BadPageLabels(f"{label_file} has no readable labelled box (all {sum(p.skipped for p in pages)} are "
                            "'###', '*' or empty): nothing to calibrate a recognizer on")
    _write_atomic(written, "".join(entries))
    return CropSummary(written, len(entries), len(pages), sum(page.skipped for page in pages),
                       squeezed if rec_shape is not None else None)
