"""Gate stage: the release policy's decision (`quantgate.policy.decide`) written with the policy to gate.json."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from quantgate.config import GatePolicy
from quantgate.policy.decision import Criterion as Criterion  # the stage's public names (stages/gate/__init__)
from quantgate.policy.decision import GateDecision, decide, judged_runtimes
from quantgate.policy.predictions import check_predictions, task_of_metrics
from quantgate.policy.release_duel import ReleaseDuel
from quantgate.policy.runtimes import runtime_metrics
from quantgate.stages.gate.outputs import GATE_FILE


def gate(policy: GatePolicy, evaluation_metrics: dict, out_dir: Path,
         predictions: Path | Mapping[str, Path | None] | None = None, release: ReleaseDuel | None = None,
         stale: tuple[str, ...] = (), search: dict | None = None) -> GateDecision:
    """Decide and write the decision with the policy to `out_dir/gate.json`.

    `predictions` is the evaluate stage's predictions.npz (labels, fp32_pred, int8_pred) of the primary
    runtime, or {runtime: predictions file or None} for every runtime evaluate.runtimes lists (the
    runtimes judged, in order); `release` the duel stage's record and paired files against the current
    release (None when there is no release), `stale` the reasons, found by the caller, why the metrics may not belong to this
    version's inputs, and `search` the quantize stage's search summary when quantize.strategy is 'search'.
    """
    listed = tuple(predictions) if isinstance(predictions, Mapping) else ()
    runtimes, primary = judged_runtimes(evaluation_metrics, listed)
    files = dict(predictions) if isinstance(predictions, Mapping) else {primary: predictions}
    task, _ = task_of_metrics(evaluation_metrics)
    intervals, problems = {}, []
    for runtime, predictions_file in files.items():
        if predictions_file is None:
            continue
        measured = runtime_metrics(evaluation_metrics, runtime, primary) or {}
        intervals[runtime], found = check_predictions(Path(predictions_file), measured, task,
                                                      policy.bootstrap_resamples, policy.bootstrap_seed)
        problems += found if runtime == primary else [f"{runtime}: {problem}" for problem in found]
    decision = decide(policy, evaluation_metrics, None, release, (*stale, *problems), search, runtimes, intervals)
    record = {**decision.as_dict(), "policy": policy.model_dump(mode="json")}
    (Path(out_dir) / GATE_FILE).write_text(json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n")
    return decision
