"""The release as the duel stage is given it, read from the store, and the duel's record as the gate reads it.

Plain functions (no Prefect) shared by the release flow (the duel stage, and publishing when `release` moved
since the gate), and `quantgate gate`. The duel stage itself never sees the store: it gets the release's
verified stage folders, or the reason they could not be had.
"""

from __future__ import annotations

from pathlib import Path

from quantgate.artifacts import RELEASE, ArtifactError, ArtifactNotFound, ArtifactStore, StageRef
from quantgate.flows.code_version import code_digest
from quantgate.policy.runtimes import listed_runtimes
from quantgate.stages.data.outputs import FINGERPRINT
from quantgate.stages.duel import DuelResult, ReleaseModel, duel
from quantgate.stages.duel import outputs as duel_outputs
from quantgate.stages.gate import ReleaseDuel

RELEASE_PREDICTIONS_CACHE = "release-predictions"  # the store's cache kind of the release's predictions
DUEL = duel_outputs.STAGE
# The release's stages the duel reads; source-trained releases have export and quantize too.
RELEASE_STAGES = ("data", "convert", "export", "quantize", "evaluate")


def current_release(store: ArtifactStore, model: str) -> tuple[str | None, str]:
    """The version `release` names (None: nothing released) and why it cannot be read ("" when it can)."""
    try:
        return store.alias(model, RELEASE), ""
    except ArtifactError as exc:
        return "unknown", f"the release alias cannot be read: {exc}"


def release_model(store: ArtifactStore, model: str, version: str, problem: str = ""
                  ) -> tuple[ReleaseModel, dict[str, StageRef]]:
    """`version`'s stage folders, each verified against the digests its version record holds, and their refs.

    A stage that fails verification, or a missing data stage, makes a model with that `problem` (nothing of
    it is trusted); a missing convert stage, one with that `model_problem` (its stored predictions may still
    serve, its model cannot run); an evaluation whose inputs changed since is not offered for reuse (its
    model is scored again instead).
    """
    if problem:
        return ReleaseModel(version, problem=problem), {}
    refs, folders, unusable = {}, {}, {}
    try:
        ref = store.version(model, version)
    except ArtifactError as exc:
        return ReleaseModel(version, problem=str(exc)), {}
    damaged = []
    for stage in RELEASE_STAGES:
        try:
            refs[stage] = store.finalized_stage_ref(ref, stage)
        except ArtifactNotFound as exc:  # a stage this release never had (or no record): not a damaged one
            unusable[stage] = f"its {stage} stage is missing: {exc}"
            continue
        except ArtifactError as exc:
            return ReleaseModel(version, problem=f"its record cannot be read: {exc}"), {}
        try:
            folders[stage] = store.verify_stage(refs.get(stage))
        except ArtifactError as exc:  # fails verification: nothing of this release is trusted
            refs.pop(stage, None)
            damaged.append(f"its {stage} stage is unusable: {exc}")
    if damaged or "data" in unusable:
        return ReleaseModel(version, problem="; ".join(damaged) or unusable["data"]), refs
    evaluation = store.read_manifest(refs["evaluate"])["metrics"] if "evaluate" in refs else {}
    if "evaluate" in refs and store.lineage_problems(refs["evaluate"]):
        folders.pop("evaluate")  # stale: its stored predictions may not be this model's
    return ReleaseModel(version, data_dir=folders["data"], data_metrics=store.read_manifest(refs["data"])["metrics"],
                        convert_dir=folders.get("convert"), export_dir=folders.get("export"),
                        quantize_dir=folders.get("quantize"), evaluate_dir=folders.get("evaluate"),
                        evaluation=evaluation, model_problem=unusable.get("convert", "")), refs


def prediction_cache(store: ArtifactStore):
    """The release's predictions by content (model files, pre-processing, samples), keyed by the duel's code too."""
    return store.cache(RELEASE_PREDICTIONS_CACHE, salt=code_digest(DUEL))


def duel_settings(evaluate_config: dict) -> dict:
    """What the duel runs with, from the candidate's recorded evaluate config."""
    # The release's predictions do not depend on the batch: its accuracy pass runs at the candidate's batch when one
    # was set, else at the largest that fits the memory budget (the duel stage chooses it).
    batch = evaluate_config.get("batch_size")
    return {"runtimes": list(listed_runtimes(evaluate_config)), "batch_size": None if batch is None else int(batch),
            "threads": int(evaluate_config.get("threads", 2))}


def run_duel(release: ReleaseModel, data_dir: Path, evaluate_dir: Path, evaluation: dict, settings: dict,
             out_dir: Path, cache=None) -> DuelResult:
    """The duel stage run with `settings` (duel_settings), its paired files written into `out_dir`."""
    return duel(release, data_dir, evaluate_dir, evaluation, tuple(settings["runtimes"]), out_dir,
                settings["batch_size"], settings["threads"], cache)


def evidence(version: str, metrics: dict, folder: Path) -> ReleaseDuel:
    """The gate's view of a duel record whose paired files lie in `folder`."""
    runtimes = metrics.get(duel_outputs.RUNTIMES) or {}
    paired = {}
    for runtime, entry in runtimes.items():
        name = entry.get(duel_outputs.PAIRED_FILE) if isinstance(entry, dict) else None
        paired[runtime] = folder / name if isinstance(name, str) and name == Path(name).name else None
    return ReleaseDuel(version, metrics, paired)


def stored_duel(store: ArtifactStore, ref: StageRef) -> ReleaseDuel:
    """The duel stage's record, verified with its inputs (a release stage changed since fails it closed)."""
    try:
        folder, metrics = store.verify_stage(ref), store.read_manifest(ref)["metrics"]
    except ArtifactError as exc:
        return ReleaseDuel("unknown", problem=str(exc))
    version = str(metrics.get(duel_outputs.RELEASE_VERSION))
    problems = store.lineage_problems(ref)
    if problems:
        return ReleaseDuel(version, metrics, problem="; ".join(problems))
    return evidence(version, metrics, folder)


def score_release_now(store: ArtifactStore, data: StageRef, evaluated: StageRef, release: str | None,
                      out_dir: Path, problem: str = "") -> ReleaseDuel | None:
    """A duel against `release` computed into `out_dir` (outside any version: publishing after `release` moved,
    `quantgate gate`); None when nothing is released. `problem`: why the release alias could not be read."""
    if release is None:
        return None
    released, _ = release_model(store, data.model, release, problem)
    try:
        data_dir, evaluate_dir = store.verify_stage(data), store.verify_stage(evaluated)
        manifest = store.read_manifest(evaluated)
    except ArtifactError as exc:
        return ReleaseDuel(release, problem=f"this version's evaluation cannot be read: {exc}")
    metrics = run_duel(released, data_dir, evaluate_dir, manifest["metrics"], duel_settings(manifest.get("config")
                                                                                          or {}),
                       out_dir, prediction_cache(store)).metrics
    metrics.setdefault(duel_outputs.RELEASE_DATA_FINGERPRINT, released.data_metrics.get(FINGERPRINT))
    return evidence(release, metrics, Path(out_dir))
