"""What the gate is given, read from the store: the evaluation, its provenance and the release baseline.

Plain functions (no Prefect) shared by the release flow and `quantgate gate`: the gate stage
itself never sees the store, only the numbers and the reasons they may not be trustworthy.
"""

from __future__ import annotations

import math
from pathlib import Path

from quantgate.artifacts import RELEASE, ArtifactError, ArtifactStore, StageRef
from quantgate.stages.evaluate.outputs import INT8_TOP1, PREDICTIONS_FILE
from quantgate.stages.gate import ReleaseBaseline


def gate_evidence(store: ArtifactStore, evaluated: StageRef) -> tuple[dict, Path | None, tuple[str, ...]]:
    """The evaluation metrics, its predictions file and why they may be stale ({}, None, problems if unreadable).

    Stale means the evaluation no longer belongs to the inputs it records: an input stage (convert,
    data, and transitively export, quantize, train) is gone, changed, or differs from its recorded digest.
    """
    problems = tuple(store.lineage_problems(evaluated))
    try:
        metrics = store.read_manifest(evaluated)["metrics"]
        predictions = store.verify_stage(evaluated) / PREDICTIONS_FILE
    except ArtifactError as exc:
        return {}, None, (*problems, str(exc))
    return metrics, predictions, problems


def release_baseline(store: ArtifactStore, model: str) -> ReleaseBaseline | None:
    """The current `release` version's INT8 top-1, verified against its version record; None if no release.

    Anything that keeps the number from being trusted (unreadable alias, changed or missing
    evaluation, stale inputs) yields a baseline without a number and with the reason, so the
    gate's regression criterion fails closed instead of being skipped.
    """
    try:
        version = store.alias(model, RELEASE)
    except ArtifactError as exc:
        return ReleaseBaseline("unknown", None, str(exc))
    return baseline_of(store, model, version)


def baseline_of(store: ArtifactStore, model: str, version: str | None) -> ReleaseBaseline | None:
    """`version`'s INT8 top-1 as a release baseline, verified (see release_baseline); None for no version.

    Publishing calls this with the `release` it read under the alias lock, to judge the run again
    when another run moved `release` after this one's gate read it.
    """
    if version is None:
        return None
    try:
        evaluated = store.finalized_stage_ref(store.version(model, version), "evaluate")
    except ArtifactError as exc:
        return ReleaseBaseline(version, None, str(exc))
    metrics, _, problems = gate_evidence(store, evaluated)
    value = metrics.get(INT8_TOP1)
    if problems:
        return ReleaseBaseline(version, None, "; ".join(problems))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ReleaseBaseline(version, None, f"its evaluation records {INT8_TOP1}={value!r}")
    return ReleaseBaseline(version, float(value))
