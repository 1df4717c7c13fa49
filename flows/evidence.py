"""What the gate is given, read from the store: the evaluation and its provenance (the duel with the release:
flows/duel.py).

Plain functions (no Prefect) shared by the release flow and `quantgate gate`: the gate stage
itself never sees the store, only the numbers and the reasons they may not be trustworthy.
"""

from __future__ import annotations

from pathlib import Path

from quantgate.artifacts import ArtifactError, ArtifactStore, StageRef
from quantgate.policy.runtimes import (
    PREDICTIONS_FILE_KEY,
    listed_runtimes,
    primary_runtime,
    runtime_entry,
)
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE


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
