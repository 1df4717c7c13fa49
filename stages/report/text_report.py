"""The text-recognition sections of the report: the test lines where INT8 and FP32 disagree, and which
characters each model gets wrong."""

from __future__ import annotations

from pathlib import Path

from quantgate.pictures.fonts import choose_font, glyph_warnings_counted
from quantgate.samples.reading import StoredData
from quantgate.stages.report.disagreements import code, disagreement_lines, disagreements, draw_gallery
from quantgate.stages.report.gallery import text_gallery
from quantgate.stages.report.outputs import GALLERY_SIZE, PLOTS
from quantgate.stages.report.predictions import Predictions
from quantgate.stages.report.sections import TaskSections
from quantgate.tasks import TEXT_RECOGNITION
from quantgate.tasks.text import character_errors

CHARACTER_ROWS = 30  # the characters with the most INT8 errors; the rest are counted in one line


def _pct(errors: int, count: int) -> str:
    return f"{errors} ({100.0 * errors / count:.1f} %)" if count else str(errors)


def character_table(predictions: Predictions, limit: int = CHARACTER_ROWS) -> list[str]:
    """Per reference character: how often it occurs and how often FP32 and INT8 miss it (substituted or
    dropped), most INT8 errors first."""
    fp32 = character_errors(predictions.references, predictions.fp32)
    int8 = character_errors(predictions.references, predictions.int8)
    rows = sorted(((int8[c]["errors"], fp32[c]["errors"], int8[c]["count"], c) for c in int8),
                  key=lambda row: (-row[0], -row[1], -row[2], row[3]))
    missed = [row for row in rows if row[0] or row[1]]
    lines = ["## Character errors (test split)", ""]
    if not missed:
        return lines + [f"Neither model misses any of the {len(rows)} characters of the references."]
    lines += [f"How often each reference character is substituted or dropped, most INT8 errors first; "
              f"{len(rows) - len(missed)} of {len(rows)} characters have no error in either model.", "",
              "| character | count | FP32 errors | INT8 errors | INT8 - FP32 |", "|---|---:|---:|---:|---:|"]
    for int8_errors, fp32_errors, count, character in missed[:limit]:
        lines.append(f"| {code(character)} | {count} | {_pct(fp32_errors, count)} | {_pct(int8_errors, count)} "
                     f"| {int8_errors - fp32_errors:+d} |")
    if len(missed) > limit:
        lines.append(f"| … {len(missed) - limit} more characters with errors | | | | |")
    return lines


def text_sections(data: StoredData, predictions: Predictions, evaluation: dict, out_dir: Path,
                  title: str) -> TaskSections:
    """Draw disagreements.png (when anything disagrees); the disagreement and character-error sections.

    Raises:
        DataChanged: a line image of a disagreeing test sample changed since the data stage recorded it.
    """
    shown = disagreements(predictions, GALLERY_SIZE, lambda values: [str(value) for value in values])
    font = choose_font([*shown.fp32, *shown.int8, *shown.truth])
    with glyph_warnings_counted() as glyphs:
        gallery = draw_gallery(text_gallery, shown, data, font, Path(out_dir), title)
    lines = [*disagreement_lines(shown, data, "lines", "reference", quoted=True, drawn=bool(gallery)), "",
             *character_table(predictions)]
    return TaskSections(lines, (*PLOTS[TEXT_RECOGNITION], *gallery), font, len(glyphs), shown.total)
