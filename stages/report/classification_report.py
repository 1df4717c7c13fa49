"""The classification sections of the report: per-class top-1 and the confusion matrices under the classes'
names, and the test images where INT8 and FP32 disagree."""

from __future__ import annotations

import math
from pathlib import Path

from quantgate.pictures.fonts import choose_font, glyph_warnings_counted
from quantgate.samples.reading import StoredData
from quantgate.stages.report.confusion import confusion_markdown, confusion_plot
from quantgate.stages.report.disagreements import cell, disagreement_lines, disagreements, draw_gallery
from quantgate.stages.report.gallery import classification_gallery
from quantgate.stages.report.outputs import CONFUSION_PLOT, GALLERY_SIZE, PER_CLASS_PLOT, PLOTS
from quantgate.stages.report.plots import per_class_plot
from quantgate.stages.report.predictions import Predictions
from quantgate.stages.report.sections import TaskSections
from quantgate.tasks import CLASSIFICATION
from quantgate.tasks.classification import confusion_matrix


def _num(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def class_names(data: StoredData, predictions: Predictions) -> list[str]:
    """The data stage's class names, by index; numbers for a record without names."""
    named = [str(name) for name in data.spec.get("classes") or ()]
    largest = max((int(array.max(initial=-1)) for array in (predictions.references, predictions.fp32,
                                                             predictions.int8)), default=-1)
    count = max(len(named), int(data.spec.get("num_classes", 0)), largest + 1)
    return named + [str(k) for k in range(len(named), count)]


def per_class_table(names: list[str], evaluation: dict) -> list[str]:
    fp32, int8 = evaluation.get("per_class_top1_pct_fp32") or [], evaluation.get("per_class_top1_pct_int8") or []
    lines = ["## Per-class top-1 (%)", "", "| class | FP32 | INT8 | delta (pts) |", "|---|---:|---:|---:|"]
    for k, (a, b) in enumerate(zip(fp32, int8)):
        delta = b - a if _num(a, "g") != "n/a" and _num(b, "g") != "n/a" else None
        name = names[k] if k < len(names) else str(k)
        lines.append(f"| {cell(name)} | {_num(a, '.2f')} | {_num(b, '.2f')} | {_num(delta, '+.2f')} |")
    return lines


def classification_sections(data: StoredData, predictions: Predictions, evaluation: dict, out_dir: Path,
                            title: str) -> TaskSections:
    """Draw per_class.png, confusion.png and (when anything disagrees) disagreements.png; their markdown.

    Raises:
        DataChanged: an image file of a disagreeing test sample changed since the data stage recorded it.
    """
    out_dir = Path(out_dir)
    names = class_names(data, predictions)
    shown = disagreements(predictions, GALLERY_SIZE, lambda values: [names[int(k)] for k in values])
    font = choose_font(names)
    fp32, int8 = (confusion_matrix(predictions.references, predicted, len(names))
                  for predicted in (predictions.fp32, predictions.int8))
    with glyph_warnings_counted() as glyphs:
        per_class_plot(evaluation.get("per_class_top1_pct_fp32") or [], evaluation.get("per_class_top1_pct_int8")
                       or [], out_dir / PER_CLASS_PLOT, f"{title}: top-1 per class, FP32 vs INT8", names, font)
        confusion_plot(names, fp32, int8, font, out_dir / CONFUSION_PLOT, title)
        gallery = draw_gallery(classification_gallery, shown, data, font, out_dir, title)
    lines = [*per_class_table(names, evaluation), "", f"![Per-class top-1, FP32 vs INT8]({PER_CLASS_PLOT})", "",
             *confusion_markdown(names, fp32, int8), "",
             f"![Confusion matrices, FP32, INT8 and INT8 - FP32]({CONFUSION_PLOT})", "",
             *disagreement_lines(shown, data, "images", "true class", quoted=False, drawn=bool(gallery))]
    return TaskSections(lines, (*PLOTS[CLASSIFICATION], *gallery), font, len(glyphs), shown.total)

