"""What the search reports: the summary in the quantize manifest and the full record in `search.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from quantgate.config import GatePolicy, QuantizeConfig
from quantgate.stages.evaluate.outputs import ONNXRUNTIME
from quantgate.stages.quantize.outputs import (
    DECISIONS,
    FRONTIER,
    POLICY_COST,
    POLICY_MAX_DROP,
    POLICY_MIN_AGREEMENT,
    SEARCH_FILE,
)
from quantgate.stages.quantize.trade_off import accuracy_threshold, frontier, policy_cost
from quantgate.stages.quantize.trials import Trial, TrialRunner, closest


@dataclass(frozen=True)
class SearchOutcome:
    """How the search's phases ended: why they stopped, and the fall-back ranking if one was made."""

    stopped: str
    ranking: list[dict] | None = None
    ranking_cached: bool = False
    estimates: list[dict] = field(default_factory=list)  # fall-back sets scored without a PaddleSlim run


@dataclass(frozen=True)
class FinalCalibration:
    """The kept trial's recipe calibrated once more on the full calibration set, and which model the stage wrote."""

    trial: Trial  # phase "final"
    written: Trial  # `trial`, or the kept trial when the full-set model is the worse one
    note: str  # why that one was written

    def record(self) -> dict:
        return {**self.trial.record(), "written": self.written is self.trial, "note": self.note}


def layer_costs(trials: list[Trial], kept: Trial) -> list[dict]:
    """Per FP32 layer of the kept trial: what it costs in speed, against the trial that had it in INT8.

    Each trial times its INT8 model next to FP32 in one process, so the cost is taken as a share of
    FP32's latency (INT8/FP32 with the layer in FP32 minus INT8/FP32 with it in INT8): drift of the
    machine between trials cancels out.
    """
    costs = []
    for layer in kept.float_layers:
        others = set(kept.float_layers) - {layer}
        twins = [trial for trial in trials if set(trial.float_layers) == others and trial.recipe == kept.recipe]
        twin = min(twins, key=lambda trial: trial.latency_ms_p50_int8 / trial.latency_ms_p50_fp32) if twins else None
        share = None if twin is None else 100 * (kept.latency_ms_p50_int8 / kept.latency_ms_p50_fp32
                                                  - twin.latency_ms_p50_int8 / twin.latency_ms_p50_fp32)
        costs.append({
            "layer": layer,
            "latency_cost_pct_of_fp32": share,
            "latency_cost_ms": None if share is None else share / 100 * kept.latency_ms_p50_fp32,
            "int8_passed_policy": None if twin is None else twin.passed,
            "measured_against_trial": None if twin is None else twin.index,
        })
    return costs


def step_record(trials: list[Trial]) -> list[dict]:
    """Per phase, in the order the search ran them: its trials and seconds, the closest trial it reached, and what
    that gained over every phase before it (validation split; a gain is a smaller drop, a higher agreement)."""
    steps, before = [], None
    for phase in dict.fromkeys(trial.phase for trial in trials):
        ran = [trial for trial in trials if trial.phase == phase]
        best = closest(ran)
        step = {"phase": phase, "trials": len(ran), "seconds": sum(trial.seconds for trial in ran),
                "passed": any(trial.passed for trial in ran), "closest_trial": best.index,
                "accuracy_drop_pts": best.validation["accuracy_drop_pts"], "agreement": best.validation["agreement"],
                "gain_pts": None, "gain_agreement": None}
        if before is not None:
            step["gain_pts"] = before.validation["accuracy_drop_pts"] - best.validation["accuracy_drop_pts"]
            step["gain_agreement"] = best.validation["agreement"] - before.validation["agreement"]
        steps.append(step)
        before = best if before is None else closest([before, best])
    return steps


def next_step(config: QuantizeConfig, trials: list[Trial], stopped: str) -> str:
    """When nothing passed: what the search would try next, and what that costs as measured in this search."""
    search = config.search
    fallbacks = [trial.seconds for trial in trials if trial.phase in ("fall-back", "restore")]
    each = sum(fallbacks or [trial.seconds for trial in trials]) / len(fallbacks or trials)
    if "timeout" in stopped or "max_trials" in stopped:
        return (f"more trials: raise quantize.search.timeout_s ({search.timeout_s:g} s) or max_trials "
                f"({search.max_trials}); a trial took {each:.0f} s on average here")
    if "cannot reach the policy" in stopped:  # the fall-back estimate's verdict: more FP32 groups would not do
        return ("no more FP32 groups: by the estimate, even every remaining ranked group in FP32 misses the policy; "
                "another recipe (quantize.search.recipes), recovery, or a looser policy")
    if search.recovery is False and not any(trial.phase == "recovery" for trial in trials):
        return ("recovery: set quantize.search.recovery true (AdaRound on the closest recipe: one trial, the "
                f"recipes' {max(trial.seconds for trial in trials):.0f} s plus its fitting)")
    if any(trial.phase == "fall-back" for trial in trials) or search.max_float_layers == 0:
        return (f"more FP32 layers: raise quantize.search.max_float_layers ({search.max_float_layers}); each "
                f"further layer is one trial, {each:.0f} s on average here")
    return f"a larger budget or a looser policy; a trial took {each:.0f} s on average here"


def search_summary(config: QuantizeConfig, runner: TrialRunner, kept: Trial, outcome: SearchOutcome,
                   final: FinalCalibration | None = None, validation_needed: dict | None = None) -> dict:
    """The search in the quantize manifest: the kept trial, the budget, and how the search got there.

    `passed`, `validation`, `speedup_int8_vs_fp32` and `policy_cost` are the written model's: the full-set one's
    when `final` wrote it. `kept_trial`, `recipe` and `float_layers` are what the search chose. The frontier and
    the decisions are here rather than in `search.json` alone because the report reads the summary.
    """
    trials = runner.trials
    written = kept if final is None else final.written
    policy = runner.policy
    return {
        "strategy": "search",
        "passed": written.passed,
        "stopped": outcome.stopped,
        "kept_trial": kept.index,
        "trials": len(trials),
        "wall_s": runner.elapsed_s(),
        "budget": config.search.model_dump(mode="json", exclude={"recipes"}),
        "recipe": kept.recipe,
        "float_layers": kept.float_layers,
        "float_layer_costs": layer_costs(trials, kept),
        "validation": written.validation,
        "speedup_int8_vs_fp32": written.speedup_int8_vs_fp32,
        "trial_calibration_samples": kept.calibration_samples,
        "final_calibration": None if final is None else {
            "calibration_samples": final.trial.calibration_samples, "calibration_s": final.trial.calibration_s,
            "seconds": final.trial.seconds, "calibration_cached": final.trial.calibration_cached,
            "passed": final.trial.passed, "written": final.written is final.trial, "note": final.note},
        "first_trial": {"passed": trials[0].passed, "validation": trials[0].validation},
        "calibrations_from_cache": sum(trial.calibration_cached for trial in trials),
        "failed_recipes": runner.failed_recipes,
        "ranking_from_cache": outcome.ranking_cached,
        "fallback_estimates": len(outcome.estimates),
        "steps": step_record(trials),
        "next_step": None if written.passed else next_step(config, trials, outcome.stopped),
        "validation_samples_needed": validation_needed,
        FRONTIER: frontier(trials, kept, None if final is None else final.trial),
        POLICY_MAX_DROP: accuracy_threshold(policy, written.validation),
        POLICY_MIN_AGREEMENT: policy.threshold("min_agreement", ONNXRUNTIME),
        POLICY_COST: policy_cost(policy, trials, written),
        DECISIONS: list(runner.decisions),  # how the search chose between trials
    }


def write_search_record(out_dir: Path, summary: dict, policy: GatePolicy, outcome: SearchOutcome,
                        trials: list[Trial], final: FinalCalibration | None = None) -> None:
    """`search.json`: the summary plus the policy, the ranking, every estimate, every trial and the final one."""
    record = {**summary, "policy": policy.model_dump(mode="json"), "ranking": outcome.ranking,
              "fallback_estimates_detail": outcome.estimates,
              "trials_detail": [trial.record() for trial in trials],
              "final_calibration_detail": None if final is None else final.record()}
    (Path(out_dir) / SEARCH_FILE).write_text(json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n")
