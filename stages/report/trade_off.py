"""The search's trade-off in the report: each candidate's validation accuracy drop against its INT8 speed-up, the
policy's largest allowed drop, the Pareto front and the kept trial, with the sentence that says what the policy
cost. Drawn from the quantize manifest's search summary; a run without a search (strategy 'single') has neither.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from quantgate.stages.quantize.outputs import FRONTIER, POLICY_COST, POLICY_MAX_DROP
from quantgate.stages.report.outputs import TRADE_OFF_PLOT
from quantgate.stages.report.plots import DPI, FP32_COLOR, INT8_COLOR

PASS_COLOR, FAIL_COLOR, POLICY_COLOR = "#55A868", "#C44E52", "0.35"


def _plotted(search: dict | None) -> list[dict]:
    """The frontier's candidates that have both a drop and a speed-up (an older summary has no frontier)."""
    entries = (search or {}).get(FRONTIER) or []
    return [entry for entry in entries
            if entry.get("accuracy_drop_pts") is not None and entry.get("speedup_int8_vs_fp32") is not None]


def has_trade_off(search: dict | None) -> bool:
    return bool(_plotted(search))


def trade_off_plot(search: dict, out_file: Path, title: str) -> None:
    """Drop (pts) against speed-up: passing and failing candidates apart, each labelled by its trial number (the
    final calibration 'F'), the policy's largest drop as a line, the Pareto front joined, the kept trial ringed."""
    entries = _plotted(search)
    figure = Figure(figsize=(8, 5), dpi=DPI, layout="constrained")
    axes = figure.subplots()
    for passed, marker, color, label in ((True, "o", PASS_COLOR, "passes the policy"),
                                         (False, "X", FAIL_COLOR, "misses the policy")):
        shown = [entry for entry in entries if bool(entry.get("passed")) is passed]
        if shown:
            axes.scatter([entry["speedup_int8_vs_fp32"] for entry in shown],
                         [entry["accuracy_drop_pts"] for entry in shown], marker=marker, s=55, color=color,
                         label=label, zorder=3)
    for entry in entries:
        axes.annotate("F" if entry.get("final") else str(entry.get("index")),
                      (entry["speedup_int8_vs_fp32"], entry["accuracy_drop_pts"]), textcoords="offset points",
                      xytext=(8, 6), fontsize=8, color="0.2")
    front = sorted((entry for entry in entries if entry.get("pareto")), key=lambda entry: entry["speedup_int8_vs_fp32"])
    if front:
        axes.plot([entry["speedup_int8_vs_fp32"] for entry in front], [entry["accuracy_drop_pts"] for entry in front],
                  color=FP32_COLOR, linewidth=1.5, alpha=0.8, label="Pareto front", zorder=2)
    kept = [entry for entry in entries if entry.get("kept")]
    if kept:
        axes.scatter([kept[0]["speedup_int8_vs_fp32"]], [kept[0]["accuracy_drop_pts"]], s=260, facecolors="none",
                     edgecolors=INT8_COLOR, linewidths=2, label=f"kept: trial {kept[0].get('index')}", zorder=4)
    max_drop = search.get(POLICY_MAX_DROP)
    if max_drop is not None:
        axes.axhline(max_drop, color=POLICY_COLOR, linestyle="--", linewidth=1.2,
                     label=f"policy: largest drop {max_drop:g} pts")
    axes.axhline(0.0, color="0.75", linewidth=0.8)
    axes.set_xlabel("speed-up INT8 / FP32 (onnxruntime, median at the latency batch)")
    axes.set_ylabel("accuracy drop on the validation split (pts)")
    axes.grid(alpha=0.3)
    axes.margins(x=0.12, y=0.15)
    axes.legend(loc="best", fontsize=8)
    figure.suptitle(title, fontsize=11)
    figure.savefig(out_file)


def trade_off_lines(search: dict | None) -> list[str]:
    """The picture and the policy's cost, under the search's section; none without a frontier to draw."""
    if not has_trade_off(search):
        return []
    lines = ["", f"![Validation accuracy drop against INT8 speed-up, per search trial]({TRADE_OFF_PLOT})"]
    if search.get(POLICY_COST):
        lines += ["", f"What the policy cost: {search[POLICY_COST]}."]
    return lines
