"""The report's "vs release" section: both versions' INT8 numbers on the same test samples (the duel stage's
paired files), and a gallery of the samples the release got right and this version gets wrong (then the
reverse), numbered like its table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from quantgate.pictures.fonts import FontChoice, choose_font, glyph_warnings_counted
from quantgate.samples.reading import StoredData
from quantgate.stages.duel import outputs as duel
from quantgate.stages.report.disagreements import cell, code, disagreements
from quantgate.stages.report.gallery import GalleryItem, classification_gallery, text_gallery
from quantgate.stages.report.outputs import GALLERY_SIZE, RELEASE_DUEL_PLOT
from quantgate.stages.report.predictions import Predictions, files_of, images_of

NAMES = ("release", "this version")


def _num(value, spec: str) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return format(value, spec) if ok else "n/a"


def _table(record: dict, summary: dict, text: bool) -> list[str]:
    lines = ["| runtime | release INT8 | this INT8 | regression | 95 % CI (paired bootstrap) "
             f"{'| release CER | this CER ' if text else ''}| release's predictions |",
             f"|---|---:|---:|---:|---|{'---:|---:|' if text else ''}---|"]
    for runtime, entry in (record.get(duel.RUNTIMES) or {}).items():
        interval = ((summary.get("runtimes") or {}).get(runtime) or {}).get("interval") or {}
        ci = f"[{_num(interval.get('low_pts'), '+.2f')}, {_num(interval.get('high_pts'), '+.2f')}] pts" \
            if interval else "n/a"
        cer = (f"| {_num(entry.get(duel.RELEASE_INT8_CER), '.2f')} % | {_num(entry.get(duel.CANDIDATE_INT8_CER), '.2f')} % "
               if text else "")
        lines.append(f"| {runtime} | {_num(entry.get(duel.RELEASE_INT8_TOP1), '.2f')} % "
                     f"| {_num(entry.get(duel.CANDIDATE_INT8_TOP1), '.2f')} % | {_num(entry.get(duel.REGRESSION), '+.2f')} pts "
                     f"| {ci} {cer}| {entry.get(duel.RELEASE_PREDICTIONS)} ({_num(entry.get(duel.SECONDS), '.2f')} s) |")
    return lines


def release_sections(record: dict | None, summary: dict | None, duel_dir: Path | None, data: StoredData,
                     primary: str, shown_as, out_dir: Path, title: str) -> tuple[list[str], list[str], int]:
    """The section's markdown, the pictures drawn (RELEASE_DUEL_PLOT or none) and matplotlib's glyph warnings.

    `record` is the duel stage's metrics (None: nothing released), `summary` the gate's view of it,
    `shown_as` turns predictions into strings (class names, or the lines).

    Raises:
        DataChanged: a test image shown changed since the data stage recorded it.
    """
    heading = "## vs release (the same test samples)"
    if record is None:
        return [heading, "", "No release yet: nothing to compare with."], [], 0
    version = record.get(duel.RELEASE_VERSION)
    statement = (summary or {}).get("statement") or record.get(duel.PROBLEM) or ""
    if record.get(duel.STATUS) != duel.PAIRED:
        return [f"## vs release {version}", "", f"Not compared: {statement}."], [], 0
    lines = [f"## vs release {version} (the same test samples)", "", f"{statement[:1].upper()}{statement[1:]}; "
             f"scoring the release took {_num(record.get(duel.RELEASE_SCORING_S), '.2f')} s.", "",
             *_table(record, summary or {}, data.is_text), ""]
    if data.is_detection:  # a page's boxes are no string to list: the numbers above say it
        return lines, [], 0
    paired = Path(duel_dir) / duel.paired_file(primary) if duel_dir is not None else None
    try:
        with np.load(paired, allow_pickle=False) as stored:
            rows, references = stored["rows"], stored["references"]
            release_pred, candidate_pred = stored["release_pred"], stored["candidate_pred"]
    except (OSError, ValueError, KeyError, TypeError):
        return [*lines, f"(the {primary} paired file cannot be read)"], [], 0
    both = Predictions(references, release_pred, candidate_pred)
    shown = disagreements(both, GALLERY_SIZE, shown_as)
    if not shown.total:
        return [*lines, f"Both predict the same on all {len(references)} paired samples ({primary})."], [], 0
    test_rows = rows[shown.rows]
    font = choose_font([*shown.fp32, *shown.int8, *shown.truth])
    items = [GalleryItem(number, image, *strings) for number, (image, *strings) in
             enumerate(zip(images_of(data, test_rows), shown.fp32, shown.int8, shown.truth), start=1)]
    with glyph_warnings_counted() as glyphs:
        draw = text_gallery if data.is_text else classification_gallery
        draw(items, shown.total, font, Path(out_dir) / RELEASE_DUEL_PLOT, f"{title} vs release {version}", NAMES)
    return [*lines, *_gallery_lines(shown, data, test_rows, primary, font)], [RELEASE_DUEL_PLOT], len(glyphs)


def _gallery_lines(shown, data: StoredData, test_rows: np.ndarray, primary: str, font: FontChoice) -> list[str]:
    said = ["release" if r == t else "this version" if c == t else "neither"
            for r, c, t in zip(shown.fp32, shown.int8, shown.truth)]
    value = code if data.is_text else cell
    lines = [f"The two disagree on {shown.total} paired samples ({primary}); shown first those the release got right "
             f"and this version gets wrong ({said.count('release')} shown), then the reverse "
             f"({said.count('this version')}).", "", f"![Paired samples where the release and this version disagree]"
             f"({RELEASE_DUEL_PLOT})", "", "| # | test row | source | release | this version | truth | right |",
             "|---:|---:|---|---|---|---|---|"]
    for number, (row, source, old, new, truth, right) in enumerate(
            zip(test_rows, files_of(data, test_rows), shown.fp32, shown.int8, shown.truth, said), start=1):
        lines.append(f"| {number} | {int(row)} | {cell(source)} | {value(old)} | {value(new)} | {value(truth)} "
                     f"| {right} |")
    return lines
