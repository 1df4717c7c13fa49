"""The confusion matrices of FP32 and INT8 on the test split: a heat-map picture and a markdown table.

Next to both matrices the picture shows INT8 - FP32, the confusions quantization added (red) or removed
(blue): with a good INT8 model the two matrices look alike and the difference is where to look.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from quantgate.pictures.fonts import FontChoice

DPI = 110
TABLE_CLASSES = 12  # up to this many classes the whole matrix is a table; beyond, the top confusions are
TOP_CONFUSIONS = 15
ANNOTATED_CLASSES = 20  # counts are written into the cells up to this many classes
LABELLED_CLASSES = 40  # tick labels up to this many classes


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def matrix_table(classes: list[str], fp32: np.ndarray, int8: np.ndarray) -> list[str]:
    """The whole INT8 matrix as markdown, the FP32 count beside each cell where it differs."""
    header = "| true \\ predicted | " + " | ".join(_escape(name) for name in classes) + " |"
    lines = ["Rows: true class; columns: INT8's prediction; (FP32's count) where it differs.", "", header,
             "|---|" + "---:|" * len(classes)]
    for k, name in enumerate(classes):
        cells = [f"**{b}** ({a})" if a != b else str(b) for a, b in zip(fp32[k], int8[k])]
        lines.append(f"| {_escape(name)} | " + " | ".join(cells) + " |")
    return lines


def top_confusions(classes: list[str], fp32: np.ndarray, int8: np.ndarray, limit: int = TOP_CONFUSIONS) -> list[str]:
    """The most frequent (true, predicted) pairs of either model, off the diagonal, INT8's count first."""
    off = ~np.eye(len(classes), dtype=bool)
    pairs = [(int(int8[t, p]), int(fp32[t, p]), t, p) for t, p in zip(*np.nonzero(off & ((fp32 > 0) | (int8 > 0))))]
    pairs.sort(key=lambda pair: (-pair[0], -pair[1], pair[2], pair[3]))
    if not pairs:
        return ["Neither model confuses any class on the test split."]
    lines = [f"The {min(limit, len(pairs))} most frequent confusions of {len(pairs)} (true class taken for "
             "another), most frequent in INT8 first:", "", "| true | predicted | INT8 | FP32 |", "|---|---|---:|---:|"]
    for b, a, t, p in pairs[:limit]:
        lines.append(f"| {_escape(classes[t])} | {_escape(classes[p])} | {b} | {a} |")
    return lines


def confusion_markdown(classes: list[str], fp32: np.ndarray, int8: np.ndarray) -> list[str]:
    """The matrix as a table for few classes, the top confusions for many."""
    table = matrix_table(classes, fp32, int8) if len(classes) <= TABLE_CLASSES else top_confusions(classes, fp32, int8)
    return ["## Confusion matrix (test split)", "", *table]


def _panel(figure: Figure, axes, counts: np.ndarray, title: str, diverging: bool, labels: list[str] | None,
           font: FontChoice) -> None:
    n = len(counts)
    bound = max(1, int(np.abs(counts).max()))
    if diverging:
        image = axes.imshow(counts, cmap="RdBu_r", vmin=-bound, vmax=bound)
    else:  # colour by share of the true class, so small classes and the off-diagonal stay visible
        totals = np.maximum(counts.sum(axis=1, keepdims=True), 1)
        image = axes.imshow(counts / totals, cmap="Blues", vmin=0, vmax=1)
    figure.colorbar(image, ax=axes, shrink=0.75, label="INT8 - FP32 (count)" if diverging else "share of true class")
    if n <= ANNOTATED_CLASSES:
        for t in range(n):
            for p in range(n):
                if counts[t, p]:
                    dark = (abs(counts[t, p]) > 0.6 * bound if diverging
                            else counts[t, p] / max(counts[t].sum(), 1) > 0.6)
                    axes.text(p, t, f"{counts[t, p]:+d}" if diverging else str(counts[t, p]), ha="center",
                              va="center", fontsize=7 if n > 10 else 8, color="white" if dark else "0.1")
    ticks = np.arange(n) if labels is not None else []
    axes.set_xticks(ticks, labels or [], rotation=90 if n > 10 else 0, fontproperties=font.properties(8),
                    parse_math=False)
    axes.set_yticks(ticks, labels or [], fontproperties=font.properties(8), parse_math=False)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title, fontsize=10)


def confusion_plot(classes: list[str], fp32: np.ndarray, int8: np.ndarray, font: FontChoice, out_file: Path,
                   title: str) -> None:
    """FP32's and INT8's confusion matrices and their difference, side by side."""
    n = len(classes)
    if n > LABELLED_CLASSES:
        labels = None
    elif font.draws_strings:
        labels = [name if len(name) <= 12 else name[:11] + "…" for name in classes]
    else:  # the markdown table names the classes
        labels = [str(k) for k in range(n)]
    figure = Figure(figsize=(15, 5.2), dpi=DPI, layout="constrained")
    for axes, counts, name, diverging in zip(figure.subplots(1, 3), (fp32, int8, int8 - fp32),
                                             ("FP32", "INT8", "INT8 - FP32"), (False, False, True)):
        _panel(figure, axes, counts, name, diverging, labels, font)
    note = "" if font.draws_strings or labels is None else " (class numbers: the names are in the report's table)"
    figure.suptitle(f"{title}: confusion matrices on the test split{note}", fontsize=11)
    figure.savefig(out_file)
