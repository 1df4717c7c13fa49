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
from quantgate.stages.gate.runtimes import (
    DEFAULT_RUNTIME,
    PREDICTIONS_FILE_KEY,
    PRIMARY_RUNTIME,
    listed_runtimes,
    primary_runtime,
    runtime_entry,
)


def gate_evidence(store: ArtifactStore, evaluated: StageRef) -> tuple[dict, dict[str, Path | None], tuple[str, ...]]:
    """The evaluation metrics, {runtime: its predictions file} for every runtime the evaluation was asked for
    (evaluate.runtimes, in order), and why they may be stale ({}, {}, problems if unreadable).

    Stale means the evaluation no longer belongs to the inputs it records: an input stage (convert,
    data, and transitively export, quantize, train) is gone, changed, or differs from its recorded digest.
    A runtime without metrics gets None (the gate fails its criteria); one whose metrics name no
    predictions file in the evaluation's folder gets None and a problem.
    """
    problems = list(store.lineage_problems(evaluated))
    try:
        manifest = store.read_manifest(evaluated)
        folder = store.verify_stage(evaluated)
    except ArtifactError as exc:
        return {}, {}, (*problems, str(exc))
    metrics, runtimes = manifest["metrics"], listed_runtimes(manifest.get("config"))
    primary = primary_runtime(runtimes)
    predictions: dict[str, Path | None] = {}
    for runtime in runtimes:
        entry = runtime_entry(metrics, runtime)
        name = PREDICTIONS_FILE if runtime == primary else entry.get(PREDICTIONS_FILE_KEY)
        if runtime != primary and not entry:
            predictions[runtime] = None  # no metrics at all: the gate says so in each of its criteria
        elif isinstance(name, str) and name == Path(name).name and (folder / name).is_file():
            predictions[runtime] = folder / name
        else:
            predictions[runtime] = None
            problems.append(f"{runtime}: the evaluation has no predictions file {name!r}")
    return metrics, predictions, tuple(problems)


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
    runtime = metrics.get(PRIMARY_RUNTIME) or DEFAULT_RUNTIME  # evaluations before issue 18 ran onnxruntime only
    if problems:
        return ReleaseBaseline(version, None, "; ".join(problems), runtime)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ReleaseBaseline(version, None, f"its evaluation records {INT8_TOP1}={value!r}", runtime)
    return ReleaseBaseline(version, float(value), runtime=runtime)
