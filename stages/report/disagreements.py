"""The report's "where INT8 and FP32 disagree" section, for both tasks: a table of the disagreeing test samples
(where each comes from, FP32, INT8, the truth) and the gallery picture of the same samples, numbered alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.pictures.fonts import FontChoice
from quantgate.samples.reading import StoredData
from quantgate.stages.report.gallery import GalleryItem
from quantgate.stages.report.outputs import DISAGREEMENTS_PLOT
from quantgate.stages.report.predictions import Predictions, files_of, images_of

HEADING = "## Where INT8 and FP32 disagree (test split)"


def cell(text: str) -> str:
    """`text` safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: str) -> str:
    """`text` as a code span in a table cell, so spaces and look-alike characters stay visible."""
    text = cell(text)
    if not text:
        return "*(empty)*"
    return f"`` {text} ``" if "`" in text else f"`{text}`"


@dataclass(frozen=True)
class Disagreements:
    """The disagreeing rows the report shows, as strings (class names, or the text lines)."""

    rows: np.ndarray
    total: int  # disagreeing test samples, shown or not
    test_size: int
    fp32: list[str]
    int8: list[str]
    truth: list[str]

    def items(self, data: StoredData) -> list[GalleryItem]:
        """The gallery's samples, their images read from the data stage for these rows only."""
        images = images_of(data, self.rows)
        return [GalleryItem(number, image, *strings) for number, (image, *strings) in
                enumerate(zip(images, self.fp32, self.int8, self.truth), start=1)]


def disagreements(predictions: Predictions, limit: int, shown_as: Callable[[np.ndarray], list[str]]) -> Disagreements:
    """At most `limit` disagreeing rows (see Predictions.shown), each value turned to a string by `shown_as`."""
    rows = predictions.shown(limit)
    return Disagreements(rows, len(predictions.disagreeing), len(predictions.references),
                         shown_as(predictions.fp32[rows]), shown_as(predictions.int8[rows]),
                         shown_as(predictions.references[rows]))


def _who_was_right(fp32: str, int8: str, truth: str) -> str:
    return "FP32" if fp32 == truth else "INT8" if int8 == truth else "neither"


def disagreement_lines(shown: Disagreements, data: StoredData, what: str, truth_name: str, quoted: bool,
                       drawn: bool) -> list[str]:
    """The section's markdown: a sentence, the gallery (when `drawn`) and the table of the shown rows.

    `what` names a sample ("images", "lines"); `quoted` shows the values as code spans (text lines).
    """
    if not shown.total:
        return [HEADING, "", f"INT8 and FP32 predict the same for all {shown.test_size} test {what}: there is "
                "nothing to show."]
    verdicts = [_who_was_right(*strings) for strings in zip(shown.fp32, shown.int8, shown.truth)]
    lines = [HEADING, "",
             f"INT8 and FP32 disagree on {shown.total} of {shown.test_size} test {what}"
             + (f"; the {len(shown.rows)} below are those INT8 got wrong and FP32 right first." if shown.total >
                len(shown.rows) else ".")
             + f" Of those shown, FP32 is right on {verdicts.count('FP32')}, INT8 on {verdicts.count('INT8')}, "
               f"neither on {verdicts.count('neither')}.", ""]
    if drawn:
        lines += [f"![Test {what} where INT8 and FP32 disagree]({DISAGREEMENTS_PLOT})", ""]
    shown_value = code if quoted else cell
    lines += [f"| # | test row | source | FP32 | INT8 | {truth_name} | right |", "|---:|---:|---|---|---|---|---|"]
    for number, (row, source, fp32, int8, truth, right) in enumerate(
            zip(shown.rows, files_of(data, shown.rows), shown.fp32, shown.int8, shown.truth, verdicts), start=1):
        lines.append(f"| {number} | {int(row)} | {cell(source)} | {shown_value(fp32)} | {shown_value(int8)} "
                     f"| {shown_value(truth)} | {right} |")
    return lines


def draw_gallery(draw: Callable, shown: Disagreements, data: StoredData, font: FontChoice, out_dir: Path,
                 title: str) -> list[str]:
    """Draw the gallery with `draw` (classification_gallery or text_gallery) when anything disagrees; the
    picture's file name in a list, or no name."""
    if not shown.total:
        return []
    draw(shown.items(data), shown.total, font, Path(out_dir) / DISAGREEMENTS_PLOT, title)
    return [DISAGREEMENTS_PLOT]
