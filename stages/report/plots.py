"""PNG plots of one version: training trajectory, per-class accuracy FP32 vs INT8 and latency per runtime.

matplotlib's object API (Figure + its Agg canvas) draws without pyplot, so there is no global
figure state and no display is needed on a headless worker.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from quantgate.pictures.fonts import FontChoice

DPI = 110
FP32_COLOR, INT8_COLOR = "#4C72B0", "#DD8452"
NAMED_BARS = 40  # up to this many classes the bars carry their names


def _read_steps(steps_csv: Path) -> dict[str, np.ndarray]:
    with open(steps_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(f"{steps_csv} holds no training steps")
    return {column: np.array([float(row[column]) for row in rows]) for column in rows[0]}


def training_plot(steps_csv: Path, out_file: Path, title: str) -> None:
    """Loss per step with its per-epoch mean, and the loss scale in force per step (log axis)."""
    steps = _read_steps(steps_csv)
    figure = Figure(figsize=(8, 5.5), dpi=DPI, layout="constrained")
    loss_axes, scale_axes = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1.4))
    loss_axes.plot(steps["step"], steps["loss"], color=FP32_COLOR, alpha=0.35, linewidth=1, label="loss per step")
    # Each epoch's mean loss as a flat segment over that epoch's steps, with the epoch boundaries marked.
    for number, epoch in enumerate(np.unique(steps["epoch"])):
        in_epoch = steps["epoch"] == epoch
        first, last = steps["step"][in_epoch].min(), steps["step"][in_epoch].max()
        loss_axes.hlines(steps["loss"][in_epoch].mean(), first, last, color=FP32_COLOR, linewidth=2.5,
                         label="epoch mean" if number == 0 else None)
        if number:
            for axes in (loss_axes, scale_axes):
                axes.axvline(first - 0.5, color="0.6", linestyle=":", linewidth=1)
    loss_axes.set_ylabel("cross-entropy loss")
    loss_axes.set_ylim(bottom=0)
    loss_axes.grid(alpha=0.3)
    loss_axes.legend(loc="upper right")
    figure.suptitle(title, fontsize=11)

    scale = steps["loss_scale"]
    scale_axes.step(steps["step"], scale, where="post", color=INT8_COLOR, linewidth=1.5, label="loss scale")
    if "skipped" in steps and steps["skipped"].any():  # updates skipped for inf/NaN gradients
        skipped = steps["skipped"] > 0
        scale_axes.plot(steps["step"][skipped], scale[skipped], "x", color="#C44E52", markersize=6,
                        label=f"skipped step ({int(skipped.sum())})")
        scale_axes.legend(loc="lower left", fontsize=8)
    scale_axes.set_yscale("log", base=2)
    low, high = scale.min(), scale.max()
    scale_axes.set_ylim(low / 4, high * 4)  # room around the line on the log axis, also when it is constant
    if low == high:
        note = "constant: no loss scaling" if low == 1.0 else "constant"
        scale_axes.text(0.99, 0.9, f"loss scale {low:g} ({note})", transform=scale_axes.transAxes,
                        ha="right", va="top", fontsize=9, color="0.3")
    scale_axes.set_ylabel("loss scale")
    scale_axes.set_xlabel("training step")
    scale_axes.grid(alpha=0.3)
    figure.savefig(out_file)


def per_class_plot(fp32_pct: list[float], int8_pct: list[float], out_file: Path, title: str,
                   class_names: list[str] | None = None, font: FontChoice | None = None) -> None:
    """Grouped bars of top-1 accuracy per class, FP32 next to INT8, with the INT8 - FP32 delta above.

    The bars are labelled with `class_names` when `font` draws them and they fit, with class numbers otherwise.
    """
    fp32 = np.array([math.nan if v is None else v for v in fp32_pct], dtype=float)
    int8 = np.array([math.nan if v is None else v for v in int8_pct], dtype=float)
    classes = np.arange(len(fp32))
    figure = Figure(figsize=(8, 4.5), dpi=DPI, layout="constrained")
    axes = figure.subplots()
    width = 0.4
    axes.bar(classes - width / 2, fp32, width, label="FP32", color=FP32_COLOR)
    axes.bar(classes + width / 2, int8, width, label="INT8", color=INT8_COLOR)
    finite = np.concatenate([fp32[np.isfinite(fp32)], int8[np.isfinite(int8)]])
    bottom = max(0.0, math.floor((finite.min() if finite.size else 0.0) / 10) * 10 - 10)
    axes.set_ylim(bottom, 104)
    for k, (a, b) in enumerate(zip(fp32, int8)):
        if np.isfinite(a) and np.isfinite(b) and a != b:
            axes.text(k, max(a, b) + 0.6, f"{b - a:+.1f}", ha="center", va="bottom", fontsize=8,
                      color="#C44E52" if b < a else "#55A868")
    named = (class_names is not None and len(class_names) == len(classes) <= NAMED_BARS and font is not None
             and font.draws_strings)
    if named:
        shown = [name if len(name) <= 12 else name[:11] + "…" for name in class_names]
        axes.set_xticks(classes, shown, rotation=45 if len(classes) > 10 else 0, ha="right" if len(classes) > 10
                        else "center", fontproperties=font.properties(8), parse_math=False)
    else:
        axes.set_xticks(classes)
    axes.set_xlabel("class" if named or class_names is None else "class (numbers: the names are in the report)")
    axes.set_ylabel("top-1 accuracy (%)")
    figure.suptitle(title, fontsize=11)
    axes.grid(axis="y", alpha=0.3)
    changed = int(np.sum(np.isfinite(fp32) & np.isfinite(int8) & (fp32 != int8)))
    axes.text(0.0, 1.01, f"{changed} of {len(classes)} classes differ; INT8 - FP32 (pts) above the bars",
              transform=axes.transAxes, fontsize=8, color="0.35", va="bottom")
    figure.legend(loc="outside upper right", ncol=2)
    figure.savefig(out_file)


def runtimes_plot(latency: dict[str, tuple], out_file: Path, title: str) -> None:
    """Median latency per runtime, FP32 next to INT8, with the INT8 speed-up above each pair."""
    names = list(latency)
    fp32 = np.array([math.nan if latency[n][0] is None else latency[n][0] for n in names], dtype=float)
    int8 = np.array([math.nan if latency[n][1] is None else latency[n][1] for n in names], dtype=float)
    figure = Figure(figsize=(8, 4.5), dpi=DPI, layout="constrained")
    axes = figure.subplots()
    where, width = np.arange(len(names)), 0.38
    axes.bar(where - width / 2, fp32, width, label="FP32", color=FP32_COLOR)
    axes.bar(where + width / 2, int8, width, label="INT8", color=INT8_COLOR)
    for k, (a, b) in enumerate(zip(fp32, int8)):
        if np.isfinite(a) and np.isfinite(b) and b > 0:
            axes.text(k, max(a, b) * 1.02, f"{a / b:.2f}x", ha="center", va="bottom", fontsize=9,
                      color="#55A868" if a > b else "#C44E52")
    axes.set_xticks(where, names)
    axes.set_ylabel("latency p50 (ms per batch)")
    measured = np.concatenate([fp32, int8])
    axes.set_ylim(0, (np.nanmax(measured) if np.isfinite(measured).any() else 1.0) * 1.15)  # room for the labels
    axes.grid(axis="y", alpha=0.3)
    figure.suptitle(title, fontsize=11)
    figure.legend(loc="outside upper right", ncol=2)
    figure.savefig(out_file)
