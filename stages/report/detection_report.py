"""The text-detection sections of the report: precision, recall and hmean of both models, and the pages where
INT8 finds other boxes than FP32, drawn with both models' boxes and the regions one of them misses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from quantgate.pictures.fonts import choose_font
from quantgate.pictures.page_picture import draw_page
from quantgate.samples.reading import StoredData
from quantgate.stages.report.predictions import Predictions, files_of
from quantgate.stages.report.sections import TaskSections
from quantgate.tasks.det_metrics import is_ignored, match_page
from quantgate.tasks.detection import boxes, ground_truth

PAGES_SHOWN = 4  # the pages where INT8 and FP32 differ most are drawn, at most this many
PAGE_PLOT = "page_{number}.png"
FOUND = "found"  # what a picture's panel says for a region a model's box matches (detection reads no text)


def _found(gt: list[dict], predicted: list[np.ndarray]) -> set[int]:
    """The ground-truth regions (indices) a box of `predicted` matches."""
    return {pair[0] for pair in match_page(gt, predicted).pairs}


def _pct(evaluation: dict, key: str) -> str:
    value = evaluation.get(key)
    return f"{value:.2f} %" if isinstance(value, (int, float)) else "–"


def detection_sections(data: StoredData, predictions: Predictions, evaluation: dict, out_dir: Path,
                       title: str) -> TaskSections:
    """The metrics table and the page pictures (page_1.png, ...) of the pages where the models differ most.

    Raises:
        DataChanged: a page changed since the data stage recorded it.
    """
    lines = ["## Text boxes (test pages, IoU > 0.5)", "", "| | FP32 | INT8 |", "|---|---:|---:|"]
    for name in ("precision", "recall", "hmean"):
        lines.append(f"| {name} | {_pct(evaluation, f'fp32_{name}_pct')} | {_pct(evaluation, f'int8_{name}_pct')} |")
    lines.append(f"| boxes found | {evaluation.get('fp32_boxes', '–')} | {evaluation.get('int8_boxes', '–')} |")
    lines += ["", f"Box agreement (INT8's boxes against FP32's, hmean): {evaluation.get('agreement', float('nan')):.4f}",
              ""]
    differing = []
    for row, (reference, fp32, int8) in enumerate(zip(predictions.references, predictions.fp32, predictions.int8)):
        gt = ground_truth(reference)
        only = _found(gt, boxes(fp32)) ^ _found(gt, boxes(int8))
        if only:
            differing.append((len(only), row, gt, boxes(fp32), boxes(int8), only))
    differing.sort(key=lambda item: (-item[0], item[1]))
    font = choose_font([region["transcription"] for *_, gt, _, _, _ in differing[:PAGES_SHOWN] for region in gt])
    plots = []
    if not differing:
        lines.append(f"FP32 and INT8 find the same regions on all {len(predictions.references)} test pages.")
        return TaskSections(lines, (), font, 0, 0)
    lines += [f"On {len(differing)} of {len(predictions.references)} test pages one model finds a region the other "
              f"misses; the {min(PAGES_SHOWN, len(differing))} with the most such regions (FP32 boxes blue, INT8 "
              "boxes dashed orange, the regions one misses in red):", ""]
    files = files_of(data, np.asarray([item[1] for item in differing[:PAGES_SHOWN]]))
    for number, ((count, row, gt, fp32, int8, only), source) in enumerate(zip(differing, files), start=1):
        page = np.asarray(Image.open(source).convert("RGB"))
        fp32_read = [(points, FOUND) for points in fp32]
        int8_read = [(points, FOUND) for points in int8]
        shown = {index for index in only if not is_ignored(gt[index])}
        name = PAGE_PLOT.format(number=number)
        draw_page(page, gt, fp32_read, int8_read, shown, Path(out_dir) / name, font.path)
        plots.append(name)
        lines += [f"![test page {row}: {count} region(s) found by one model only]({name})", "",
                  f"`{source}`: " + "; ".join(f"#{index} {gt[index]['transcription']!r} found by "
                                                f"{'FP32' if index in _found(gt, fp32) else 'INT8'} only"
                                                for index in sorted(shown)), ""]
    return TaskSections(lines, tuple(plots), font, 0, len(differing))
