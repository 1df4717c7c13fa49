"""Phase 3 of the search: revert groups to FP32 greedily, one real trial per revert, undoing a revert that hurts.

A group is a quantized layer and the grids that only feed it (`quantgate.int8.float_groups`; on PP-LCNetV3 its
input's HardSwish-affine grid and the integer Add/Mul the lowering builds around it), reverted together: the
layer by PaddleSlim's skip list, its grids by the lowering. As NNCF's `quantize_with_accuracy_control` does it:

- the groups are ranked by the estimate (`FallbackRanking.sensitivity`, no PaddleSlim run); a group whose
  revert alone does not bring the model closer to FP32 by the estimate is no candidate;
- before each revert, the estimate with every remaining candidate reverted too (up to max_float_layers) is
  judged: if that misses the policy, reverting more cannot reach it, and the search stops and says so;
- the next group is reverted and judged by ONE real trial; it stays reverted if that trial is closer to FP32
  than the best set so far (`evidence.closest`: McNemar on the validation samples, then the outputs' distance),
  and is undone otherwise;
- the first passing set ends the phase (the restore phase may then bring groups back to INT8).

A fall-back set that cannot be built (PaddleSlim, paddle2onnx or the lowering fails on it: `attempt`) is a revert
undone, with the error recorded, never the end of the pipeline: a search that runs out of ideas ends with the
closest trial kept and the gate failing it (exit 1), not with exit 3.
"""

from __future__ import annotations

import logging

from quantgate.config import QuantizeConfig
from quantgate.stages.quantize import evidence
from quantgate.stages.quantize.fallback_ranking import FallbackRanking
from quantgate.stages.quantize.trials import CANDIDATE_FAILURES, Trial, TrialRunner

log = logging.getLogger(__name__)

def attempt(runner: TrialRunner, phase: str, settings: QuantizeConfig, float_layers: tuple[str, ...],
            float_groups: dict[str, list[str]] | None = None) -> Trial | None:
    """`runner.run_trial`, or None when the candidate cannot be built; the failure is kept in
    `runner.failed_recipes` (with its phase and FP32 layers) and logged."""
    try:
        return runner.run_trial(phase, settings, float_layers, float_groups)
    except CANDIDATE_FAILURES as exc:
        runner.failed_recipes.append({"phase": phase, "recipe": {"algo": settings.algo},
                                      "float_layers": list(float_layers),
                                      "error": f"{type(exc).__name__}: {exc}"[:1000]})
        log.warning("search: the %s candidate with %d FP32 groups (%s) could not be built and is skipped: %s",
                    phase, len(float_layers), _named(list(float_layers)), exc)
        return None


def candidates(ranking: list[dict]) -> list[str]:
    """The ranked groups (by layer) worth a trial: measured, and closer to FP32 with the group in FP32."""
    return [entry["layer"] for entry in ranking if entry["measured"]
            and (entry["logit_error_removed"] > 0 or entry["accuracy_pts_recovered"] > 0)]


def _named(layers: list[str]) -> str:
    return ", ".join(layers) if layers else "none"


def revert_groups(runner: TrialRunner, fallbacks: FallbackRanking, order: list[str],
                  limit: int) -> tuple[Trial | None, str]:
    """Revert the groups of `order` greedily (at most `limit` at once); the first passing trial, or None, and why
    the phase stopped (a sentence naming the groups left in FP32)."""
    grids = fallbacks.groups(order)
    reverted: list[str] = []
    undone: list[str] = []
    best = fallbacks.base
    for position, layer in enumerate(order):
        kept = f"FP32 groups kept: {_named(reverted)}; undone: {_named(undone)}"
        if len(reverted) >= limit:
            return None, (f"no fall-back set passed within quantize.search.max_float_layers ({limit}) FP32 groups; "
                          f"{kept}")
        if (why := runner.exhausted()) is not None:
            return None, f"{why}; {kept}"
        everything = reverted + order[position:position + limit - len(reverted)]
        if fallbacks.estimate(everything) is False:
            estimate = fallbacks.estimates[-1]["validation"]
            capped = len(order) - position > limit - len(reverted)
            return None, (f"reverting more cannot reach the policy: the estimate with {len(everything)} groups in FP32 "
                          f"({_named(everything)}) still misses it (drop {estimate['accuracy_drop_pts']:.2f} pts, "
                          f"agreement {estimate['agreement']:.4f})"
                          f"{' within quantize.search.max_float_layers (' + str(limit) + ')' if capped else ''}; "
                          f"{kept}")
        trying = [*reverted, layer]
        trial = attempt(runner, "fall-back", fallbacks.base_settings, tuple(trying),
                        {name: grids.get(name, []) for name in trying})
        if trial is None:  # could not be built: undone, as a revert that does not help
            undone.append(layer)
            continue
        if trial.passed:
            return trial, f"passed with FP32 groups {_named(trying)}"
        closer, made = evidence.closest([best, trial])
        runner.decisions.extend({"purpose": "fall-back revert", **entry} for entry in made)
        if closer is trial:
            reverted, best = trying, trial
        else:  # the revert did not bring the model closer to FP32: undo it
            undone.append(layer)
            log.info("search: reverting %s to FP32 did not bring trial %d closer to FP32 than trial %d; undone",
                     layer, trial.index, best.index)
    return None, (f"no fall-back set passed: each of the {len(order)} ranked groups was tried; "
                  f"FP32 groups kept: {_named(reverted)}; undone: {_named(undone)}")
