"""Gallery pictures of the test samples where INT8 and FP32 disagree: each image with both predictions and
the truth, INT8 and FP32 in green where they match the truth and in red where they do not.

The images are the models' inputs (normalized), stretched per image to the full grey range for the eye.
When no installed font has the strings' characters (see fonts.py), a sample's caption names its row in
the report's table and which model was right, instead of drawing boxes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from quantgate.pictures.fonts import FontChoice

DPI = 110
RIGHT, WRONG, TRUTH = "#2E7D32", "#C62828", "0.15"
CLASS_COLUMNS = 6
TOP, BOTTOM = 0.45, 0.3  # inches above the samples (title) and below them (legend)
LINE_POINTS = 12  # caption line height
CAPTION_CHARACTERS = {"classification": 16, "text_recognition": 48}


@dataclass(frozen=True)
class GalleryItem:
    """One disagreeing test sample: `number` is its row in the report's table."""

    number: int
    image: np.ndarray  # [C, H, W] float32, as the models saw it
    fp32: str
    int8: str
    truth: str


def viewable(image: np.ndarray) -> tuple[np.ndarray, str | None]:
    """[C, H, W] model input as an [H, W] grey or [H, W, 3] colour picture in [0, 1], and the colour map."""
    pixels = np.asarray(image, np.float32)
    low, high = float(pixels.min()), float(pixels.max())
    pixels = (pixels - low) / (high - low) if high > low else np.zeros_like(pixels)
    if pixels.shape[0] == 3:
        return pixels.transpose(1, 2, 0), None
    return pixels[0], "gray"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


MODELS = ("FP32", "INT8")  # what the two predictions of an item are called (the duel's: release, this version)


def _right_or_wrong(item: GalleryItem, names: tuple[str, str] = MODELS) -> str:
    said = {True: "right", False: "wrong"}
    return f"{names[0]} {said[item.fp32 == item.truth]}, {names[1]} {said[item.int8 == item.truth]}"


def _caption_lines(item: GalleryItem, font: FontChoice, limit: int, truth: str,
                   numbered: bool, names: tuple[str, str] = MODELS) -> list[tuple[str, str]]:
    """(text, colour) lines under or beside one sample; `numbered` starts them with its table row."""
    if not font.draws_strings:
        return [(f"#{item.number}: see table row {item.number}", TRUTH), (_right_or_wrong(item, names), TRUTH)]
    number = f"#{item.number}  " if numbered else ""
    return [(f"{number}{names[0]}: {_short(item.fp32, limit)}", RIGHT if item.fp32 == item.truth else WRONG),
            (f"{names[1]}: {_short(item.int8, limit)}", RIGHT if item.int8 == item.truth else WRONG),
            (f"{truth}: {_short(item.truth, limit)}", TRUTH)]


def _figure(width: float, height: float, title: str, shown: int, total: int, what: str, font: FontChoice,
            names: tuple[str, str] = MODELS) -> Figure:
    """A figure of `width` x `height` inches plus room for the title above and the legend below."""
    figure = Figure(figsize=(width, height + TOP + BOTTOM), dpi=DPI)
    figure.text(0.5, 1 - 0.12 / (height + TOP + BOTTOM), f"{title}: {shown} of {total} test {what} where {names[1]} and "
                f"{names[0]} disagree", ha="center", va="top", fontsize=11)
    legend = ("green: matches the truth; red: does not; #N: row N of the report's table" if font.draws_strings else
              f"#N: row N of the report's table, which shows the strings ({font.statement_short()})")
    figure.text(0.5, 0.08 / (height + TOP + BOTTOM), legend, ha="center", va="bottom", fontsize=8, color="0.35")
    return figure


def _axes(figure: Figure, left: float, top: float, width: float, height: float, framed: bool = False):
    """Axes placed in inches from the figure's top-left corner (below the title), without ticks; `framed` draws
    a thin grey frame (an image with a white background would otherwise merge with the page)."""
    full_width, full_height = figure.get_size_inches()
    axes = figure.add_axes((left / full_width, 1 - (TOP + top + height) / full_height, width / full_width,
                            height / full_height))
    if not framed:
        axes.set_axis_off()
        return axes
    axes.set_xticks([])
    axes.set_yticks([])
    for spine in axes.spines.values():
        spine.set_color("0.75")
    return axes


def _caption(axes, lines: list[tuple[str, str]], x: float, y: float, ha: str, properties) -> None:
    """Lines of text starting at (x, y) in the axes' fraction, one line height apart."""
    for number, (text, colour) in enumerate(lines):
        axes.annotate(text, (x, y), xycoords="axes fraction", xytext=(0, -LINE_POINTS * number),
                      textcoords="offset points", ha=ha, va="top", color=colour, fontproperties=properties,
                      annotation_clip=False, parse_math=False)


def classification_gallery(items: list[GalleryItem], total: int, font: FontChoice, out_file: Path,
                           title: str, names: tuple[str, str] = MODELS) -> None:
    """A grid of images, each with its FP32 class, INT8 class and true class below it."""
    columns = min(CLASS_COLUMNS, len(items))
    rows = math.ceil(len(items) / columns)
    cell_width, image_size, caption_height = 1.9, 1.45, 0.6
    figure = _figure(cell_width * columns, (image_size + caption_height) * rows, title, len(items), total, "images",
                     font, names)
    properties = font.properties(8)
    for k, item in enumerate(items):
        row, column = divmod(k, columns)
        axes = _axes(figure, column * cell_width + (cell_width - image_size) / 2,
                     row * (image_size + caption_height), image_size, image_size, framed=True)
        pixels, colours = viewable(item.image)
        axes.imshow(pixels, cmap=colours, interpolation="nearest")
        caption = _caption_lines(item, font, CAPTION_CHARACTERS["classification"], "true", True, names)
        _caption(axes, caption, 0.5, -0.03, "center", properties)
    figure.savefig(out_file)


def text_gallery(items: list[GalleryItem], total: int, font: FontChoice, out_file: Path, title: str,
                 names: tuple[str, str] = MODELS) -> None:
    """One test line per row: the line image on the left, FP32, INT8 and the reference on the right."""
    margin, image_width, row_height, text_width = 0.45, 5.0, 0.8, 4.6
    figure = _figure(margin + image_width + 0.25 + text_width, row_height * len(items), title, len(items), total,
                     "lines", font, names)
    properties = font.properties(10)
    for k, item in enumerate(items):
        pixels, colours = viewable(item.image)
        image_axes = _axes(figure, margin, k * row_height + 0.08, image_width, row_height - 0.16, framed=True)
        image_axes.imshow(pixels, cmap=colours, interpolation="nearest")
        image_axes.set_anchor("W")  # a short line keeps its aspect, flush left
        image_axes.annotate(f"#{item.number}", (0, 0.5), xycoords="axes fraction", xytext=(-6, 0),
                            textcoords="offset points", ha="right", va="center", fontsize=9, color=TRUTH)
        text_axes = _axes(figure, margin + image_width + 0.25, k * row_height + 0.08, text_width, row_height - 0.16)
        caption = _caption_lines(item, font, CAPTION_CHARACTERS["text_recognition"], "ref ", False, names)
        _caption(text_axes, caption, 0.0, 1.0, "left", properties)
    figure.savefig(out_file)
