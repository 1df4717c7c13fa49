"""The trade-off the search measured: every candidate's accuracy drop against its speed-up (the frontier), which of
them no other candidate beats on both (Pareto-optimal), and one sentence saying what the policy cost.

Read from the trials' onnxruntime numbers (their top level), all on the validation split; each trial's pass or miss is
its verdict in every runtime it was judged in (`runtime_checks`).
A trial's fields that not every trial has (`speedup_batch1`, `latency_batch_size`, the drop's interval: none for
a detector's hmean, none in a trial recorded before they were measured) are recorded as None when absent.
"""

from __future__ import annotations

import math

from quantgate.config import GatePolicy
from quantgate.stages.evaluate.outputs import HMEAN_DROP, ONNXRUNTIME
from quantgate.stages.quantize.trials import Trial

SHOWN_LAYERS = 5  # FP32 layers named in the sentence; more are counted


def accuracy_threshold(policy: GatePolicy, validation: dict) -> float:
    """The policy's largest allowed drop in onnxruntime: of the hmean for text detection (it replaces top-1's
    there), else of top-1 or line accuracy."""
    name = "max_hmean_drop_pts" if HMEAN_DROP in validation else "max_accuracy_drop"
    return policy.threshold(name, ONNXRUNTIME)


def _finite(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _interval(value) -> list[float] | None:
    bounds = [_finite(bound) for bound in value] if isinstance(value, (list, tuple)) and len(value) == 2 else [None]
    return None if None in bounds else bounds


def _drop_interval(validation: dict) -> list[float] | None:
    """The drop's 95 % interval: the paired one the check measured, else from INT8's accuracy interval with FP32's
    accuracy taken as measured (wider than the paired one: it ignores that both read the same samples)."""
    if (paired := _interval(validation.get("accuracy_drop_ci95_pts"))) is not None:
        return paired
    int8, fp32 = _interval(validation.get("int8_top1_ci95_pct")), _finite(validation.get("fp32_top1_pct"))
    return None if int8 is None or fp32 is None else [fp32 - int8[1], fp32 - int8[0]]


def pareto_flags(points: list[tuple[float | None, float | None]]) -> list[bool]:
    """Per (drop, speed-up): True when no other point beats it, i.e. none is at least as good on both and better on
    one. Drops move in steps of one validation sample, so ties are common: of two trials with the same drop only the
    faster is on the front (equal points both are). A point missing either number is on no front."""
    measured = [(drop, speed) for drop, speed in points if drop is not None and speed is not None]

    def beaten(drop: float, speed: float) -> bool:
        return any(other_drop <= drop and other_speed >= speed and (other_drop, other_speed) != (drop, speed)
                   for other_drop, other_speed in measured)

    return [drop is not None and speed is not None and not beaten(drop, speed) for drop, speed in points]


def frontier(trials: list[Trial], kept: Trial, final: Trial | None = None) -> list[dict]:
    """One entry per trial, then the final calibration (`final`: true) if there was one, with `pareto` marked
    over all of them."""
    candidates = [*trials, *([] if final is None else [final])]
    entries = []
    for trial in candidates:
        validation = trial.validation
        entries.append({
            "index": trial.index,
            "phase": trial.phase,
            "final": trial is final,
            "kept": trial is kept,
            "algo": trial.recipe.get("algo"),
            "rounding": trial.recipe.get("rounding"),
            "float_layer_count": len(trial.float_layers),
            "float_layers": list(trial.float_layers),
            "accuracy_drop_pts": _finite(validation.get("accuracy_drop_pts")),
            "accuracy_drop_ci95_pts": _drop_interval(validation),
            "agreement": _finite(validation.get("agreement")),
            "passed": trial.passed,
            "speedup_int8_vs_fp32": _finite(trial.speedup_int8_vs_fp32),
            "speedup_batch1": _finite(trial.speedup_batch1),
            "latency_batch_size": trial.latency_batch_size,
        })
    flags = pareto_flags([(entry["accuracy_drop_pts"], entry["speedup_int8_vs_fp32"]) for entry in entries])
    return [{**entry, "pareto": flag} for entry, flag in zip(entries, flags)]


def _layers(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_LAYERS])
    more = f" and {len(names) - SHOWN_LAYERS} more" if len(names) > SHOWN_LAYERS else ""
    return f"{'layer' if len(names) == 1 else 'layers'} {shown}{more}"


def policy_cost(policy: GatePolicy, trials: list[Trial], written: Trial) -> str:
    """What meeting the policy cost, in one sentence: the FP32 layers it took and the speed given up against the
    fastest all-INT8 trial; that every layer stayed INT8; or, when nothing passed, how close the search came.

    `written`: the model the stage wrote (the kept trial, or its full-set calibration).
    """
    threshold = accuracy_threshold(policy, written.validation)
    within = f"within {threshold:g} pt"
    speed = f"{written.speedup_int8_vs_fp32:.2f}x"
    if written.passed and not written.float_layers:
        return f"{within} with every layer in INT8 at {speed}"
    if written.passed:
        all_int8 = [trial.speedup_int8_vs_fp32 for trial in trials if not trial.float_layers]
        compared = f" instead of {max(all_int8):.2f}x" if all_int8 else " (no all-INT8 trial to compare)"
        return f"{within}: {_layers(written.float_layers)} in FP32, {speed}{compared}"
    drop = written.validation["accuracy_drop_pts"]
    closest = f"the closest {-drop:+.3g} pt at {speed}"
    if any(trial.validation["accuracy_drop_pts"] <= threshold for trial in [*trials, written]):
        # some candidate was close enough in accuracy: another criterion (agreement, speed) failed it
        return f"no candidate passed the policy; {closest} missed: {'; '.join(written.failures)}"
    return f"no candidate {within}; {closest}"
