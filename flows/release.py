"""The `release` flow: train (or take in a trained model) → export → quantize → convert → evaluate → duel
(the release on the same test samples) → gate → report → publish.

Run it with `quantgate run`, as a script, or from a deployment in prefect.yaml.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quantgate.artifacts import (
    LATEST,
    RELEASE,
    ArtifactError,
    ArtifactExists,
    ArtifactStore,
    CheckpointRef,
    StageRef,
    VersionRef,
    open_store,
)
from quantgate.artifacts.decisions import EVALUATE_DIGEST
from quantgate.artifacts.errors import AliasMoved
from quantgate.artifacts.names import version_number
from quantgate.config import GatePolicy, PipelineConfig
from quantgate.errors import Rejected
from quantgate.flows.duel import current_release, score_release_now
from quantgate.flows.report import publish_report
from quantgate.flows.system import OCR_SYSTEM, run_system
from quantgate.flows.tasks import (
    SOURCE,
    check_calibration_size,
    convert_task,
    data_task,
    duel_task,
    evaluate_task,
    export_program_task,
    export_task,
    gate_task,
    quantize_task,
    report_task,
    source_task,
    train_task,
)
from quantgate.flows.trust import check_trusted_factory, running_from_deployment
from quantgate.flows.warm_start import resolve_warm_start
from quantgate.lifetime import is_flow_run_process, keep_children
from quantgate.settings import resolve_store_root
from quantgate.stages.data.outputs import FINGERPRINT, PREPROCESSING
from quantgate.stages.evaluate import check_runtimes
from quantgate.stages.evaluate.outputs import TASK, headline_keys
from quantgate.stages.gate import Criterion
from quantgate.stages.gate.outputs import PASSED, RELEASE_DUEL
from quantgate.stages.gate.release_duel import release_criteria
from quantgate.stages.gate.runtimes import RUNTIMES, gate_runtimes, runtime_headlines, with_criterion, with_verdicts
from quantgate.stages.tasks import CLASSIFICATION
from quantgate.stages.quantize.outputs import SEARCH
from quantgate.stages.source import check_trained_model
from quantgate.stages.source.outputs import INPUT_SPEC, ORIGIN, OUTPUT_SPEC, PARAMETERS, TRAINED_HERE
from quantgate.stages.train.outputs import AMP, ARCHITECTURE, SCALER
from quantgate.terminal import RUN_LOGGER


class GateFailed(Rejected):
    """The INT8 model did not meet the release policy; `criteria` holds every failed rule (exit 1)."""

    def __init__(self, model: str, version: str, criteria: list[str]):
        self.model = model
        self.version = version
        self.criteria = list(criteria)
        super().__init__(
            f"release gate failed for {model}/{version}: " + "; ".join(self.criteria)
            + ". The version is kept for inspection and 'release' was not moved."
        )


def version_record(store: ArtifactStore, config: PipelineConfig, refs: dict[str, StageRef]) -> dict:
    """The version's final record: the gate verdict, the headline numbers (also per runtime, with each
    runtime's verdict) and each stage's wall time."""

    manifests = {stage: store.read_manifest(ref) for stage, ref in refs.items()}
    gate = manifests["gate"]["metrics"]
    evaluation = manifests["evaluate"]["metrics"]
    if SOURCE in manifests:  # trained elsewhere: no AMP, no scaler; the record says where the model came from
        source = manifests[SOURCE]["metrics"]
        trained = {AMP: None, SCALER: None, "architecture": None,
                   SOURCE: {key: source[key] for key in (TRAINED_HERE, ORIGIN, INPUT_SPEC, OUTPUT_SPEC, PARAMETERS)}}
    else:
        trained = {AMP: manifests["train"]["metrics"][AMP], SCALER: manifests["train"]["metrics"][SCALER],
                   "architecture": manifests["train"]["metrics"][ARCHITECTURE]}
    return {
        "status": "passed" if gate["passed"] else "failed",
        "gate": gate,
        "metrics": {key: evaluation[key] for key in headline_keys(evaluation)},
        RUNTIMES: runtime_headlines(evaluation, gate, headline_keys(evaluation)),
        **trained,  # amp, scaler, architecture (what a deployment needs besides the model file), or the source
        "search": manifests["quantize"]["metrics"].get(SEARCH),
        **provenance(manifests, config),
    }


def provenance(manifests: dict[str, dict], config: PipelineConfig) -> dict:
    """What every version record says besides its verdict: the data, the pre-processing, each stage's time and
    reuse, and the config."""
    return {
        "data_fingerprint_sha256": manifests["data"]["metrics"][FINGERPRINT],
        "preprocessing": manifests["data"]["metrics"].get(PREPROCESSING),
        "stage_seconds": {stage: manifest["duration_s"] for stage, manifest in manifests.items()},
        "reused": {stage: manifest["reused_from"]["version"] for stage, manifest in manifests.items()
                   if manifest.get("reused_from")},
        "config": config.model_dump(mode="json"),
    }


def record_error(store: ArtifactStore, version: VersionRef, config: PipelineConfig, exc: Exception) -> None:
    """Mark the version as errored, so it never looks complete; keep what its stages committed.

    The exception gets `version_ref`, so the CLI can say where the run's log and record are.
    """
    exc.version_ref = version
    try:
        store.finalize_version(
            version, {"status": "error", "error": f"{type(exc).__name__}: {exc}", "config": config.model_dump(mode="json")}
        )
        exc.add_note(f"version {version.model}/{version.version} is recorded with status 'error' in "
                     f"{store.version_location(version)}")
    except ArtifactExists:
        pass  # publish finalized it before failing; that record stands
    except ArtifactError as record_failed:  # e.g. the disk is still full: the version stays 'incomplete'
        exc.add_note(f"version {version.model}/{version.version} stays incomplete ({record_failed})")


def rejudged(store: ArtifactStore, version: VersionRef, record: dict, policy: GatePolicy, release: str | None,
             problem: str = "") -> dict:
    """`record` with the criteria against the release judged against `release` as it is now, if the gate saw
    another: the new release is scored on this version's test samples (flows/duel.py), then judged on the
    paired numbers in every runtime. `problem`: why the release alias could not be read.

    The gate read `release` long before publishing; another run may have moved it since. A passing
    run is judged again against the new release; if that fails, the record says "failed", carries
    the new criteria and says why, and `release` stays where it is.
    """
    gate_record = record["gate"]
    judged = (gate_record.get(RELEASE_DUEL) or {}).get("version")
    if record["status"] != "passed" or (judged == release and not problem):
        return record
    runtimes, primary = gate_runtimes(gate_record)
    task = (record.get("metrics") or {}).get(TASK) or CLASSIFICATION
    with tempfile.TemporaryDirectory() as scratch:
        evidence = score_release_now(store, store.stage_ref(version, "data"), store.stage_ref(version, "evaluate"),
                                     release, Path(scratch), problem)
        fresh, summary = release_criteria(policy, evidence, runtimes, primary, task)
    note = f"judged again: release moved from {judged or 'none'} to {release or 'none'} after this run's gate read it"
    fresh = [replace(c, note=f"{c.note}; {note}" if c.note else note) for c in fresh]
    gate_record = {**with_criterion(gate_record, *fresh), RELEASE_DUEL: summary, "rejudged": note}
    passed = gate_record[PASSED]
    # The per-runtime verdicts follow the criteria they summarise.
    runtimes_record = {RUNTIMES: with_verdicts(record[RUNTIMES], gate_record)} if RUNTIMES in record else {}
    return {**record, **runtimes_record, "gate": gate_record, "status": "passed" if passed else "failed"}


def publish_record(store: ArtifactStore, version: VersionRef, record: dict, policy: GatePolicy) -> dict:
    """Finalize the version with `record` and move `latest` and `release`; return the record as finalized.

    `release` is read and, if it moved since the gate read it, the new release is scored and the record
    judged again (`rejudged`), all outside the alias lock (scoring takes seconds); see `publish_judged`.
    """
    return publish_judged(store, version, lambda release, problem: rejudged(store, version, record, policy, release,
                                                                            problem))


def publish_judged(store: ArtifactStore, version: VersionRef, judge: Callable[[str | None, str], dict]) -> dict:
    """Finalize the version with `judge(release, problem)`'s record and move `latest` and `release`.

    `judge` gets `release` as read now (and why it could not be read) and returns the record judged against
    it, outside the alias lock. Under the model's alias lock `release` is read again: if it moved meanwhile,
    the lock is let go and the loop judges the newer one; otherwise the version is finalized, `latest` moved
    unless it already names a newer version, and `release` moved (compare-and-set) only if the record passes.
    """
    finalized = False
    while True:
        release_seen, problem = current_release(store, version.model)
        judged = judge(release_seen, problem)
        try:
            with store.alias_moves(version.model) as moves:
                release_now = moves.current(RELEASE)
                if release_now != release_seen and not problem:
                    continue  # moved while this run scored it: score the newer one, outside the lock
                if not finalized:
                    store.finalize_version(version, judged)
                    finalized = True
                else:  # judged again after another worker's move: the newest decision is what counts
                    store.record_decision(version, rejudged_decision(store, version, judged))
                latest = moves.current(LATEST)
                if latest is None or version_number(latest) < version_number(version.version):
                    moves.move(LATEST, version.version, reason=f"run finished: gate {judged['status']}")
                if judged["status"] == "passed":
                    moves.move(RELEASE, version.version, reason="gate passed", expected_previous=release_now)
        except AliasMoved:
            # Only a shared store (S3) has no lock to hold: another worker's move committed between this
            # block's read and its own commit. Read `release` again, judge again, and try again.
            continue
        return judged


def rejudged_decision(store: ArtifactStore, version: VersionRef, judged: dict) -> dict:
    """The decision a publish records when it judged its version again after the record was finalized."""
    decision = {"gate": judged.get("gate", {}), "status": judged["status"],
                "why": "judged again at publish: another worker moved an alias after this version was finalized"}
    if "evaluate" in store.version_record(version).get("stages", {}):
        decision[EVALUATE_DIGEST] = store.finalized_stage_ref(version, "evaluate").manifest_sha256
    return decision


@task(name="publish", retries=0, cache_policy=NO_CACHE)
def publish_task(store_root: str, version: VersionRef, config: PipelineConfig, refs: dict[str, StageRef]) -> dict:
    """Finalize the version, move `latest` (never backwards), and move `release` only if the gate passed."""
    store = open_store(store_root)
    record = publish_record(store, version, version_record(store, config, refs), config.gate)
    if record["status"] == "passed":
        get_run_logger().info("release -> %s/%s", version.model, version.version)
    elif record["gate"].get("rejudged"):
        get_run_logger().warning("release stays: %s", record["gate"]["rejudged"])
    return record


def resume_checkpoint(store: ArtifactStore, model: str, version: str | None) -> CheckpointRef | None:
    """The latest train checkpoint of `version` (which need not be finished), or None for a fresh run."""
    if version is None:
        return None
    return store.latest_checkpoint(store.version(model, version), "train")


@flow(name="release", validate_parameters=True)
def release(config: PipelineConfig = PipelineConfig(), store: str | None = None, resume: str | None = None,
            reuse: bool = True) -> str:
    """Train (or take in `config.trained_model`), quantize and gate one new version; returns its name, or
    raises GateFailed.

    With `resume` (a version such as "v3"), training continues from that version's latest
    checkpoint in the new version, instead of starting from freshly initialised weights.
    With `reuse`, a stage whose inputs digest matches a committed stage of an earlier version
    is taken from there (the log says "reused from vN") instead of recomputed.

    Raises:
        GateFailed: the INT8 model missed the policy; the version is kept, `release` is not moved.
        ArtifactNotFound: `resume` names a version that does not exist or has no checkpoint.
        UntrustedFactory: a run from a deployment names a `module:factory` the worker does not trust.
        ModelProblem: `config.trained_model` cannot be gated as given (before a version exists).
    """
    if is_flow_run_process():  # a worker's process for this run only: what it starts ends with it
        keep_children()
    root = str(resolve_store_root(store))
    artifact_store = open_store(root)
    if config.task == OCR_SYSTEM:  # stored components judged end to end: nothing is trained or quantized
        version, record, refs = run_system(config, root, reuse)
        return _published(artifact_store, version, record, refs)
    check_trusted_factory(config.train.architecture, running_from_deployment())  # before anything imports it
    check_runtimes(config.evaluate.runtimes)  # a runtime that is not installed fails now, not after training
    warm_start = resolve_warm_start(artifact_store, config, resume, running_from_deployment())  # train.init_from
    resume_from = resume_checkpoint(artifact_store, config.model_name, resume)  # before a version exists
    checked = check_trained_model(config) if config.trained_model else None  # a bad model: exit 2, nothing stored
    version = artifact_store.create_version(config.model_name)
    get_run_logger().info("new version %s/%s in %s", version.model, version.version, root)
    logging.getLogger(RUN_LOGGER).info("quantgate %s/%s: library output goes to %s", version.model, version.version,
                                       artifact_store.run_log_path(version))
    with artifact_store.hold_version(version):  # tells fsck this version is running, not interrupted
        try:
            refs: dict[str, StageRef] = {}
            refs["data"] = data_task(root, version, config.data, reuse, training=checked is None)
            check_calibration_size(root, refs["data"], config.quantize)
            workers = config.data.num_workers  # DataLoader processes decoding image files (none for the digits)
            if checked is None:
                refs["train"] = train_task(root, version, config.train, refs["data"], resume_from, reuse, workers,
                                           warm_start)
                refs["export"] = export_task(root, version, refs["train"], refs["data"], reuse, workers)
            else:  # a model trained elsewhere takes the train stage's place
                refs[SOURCE] = source_task(root, version, config, checked, refs["data"], reuse)
                refs["export"] = export_program_task(root, version, refs[SOURCE], refs["data"], reuse, workers)
            refs["quantize"] = quantize_task(root, version, config.quantize, refs["export"], refs["data"], reuse,
                                             config.gate, config.evaluate, workers, config.convert)
            refs["convert"] = convert_task(root, version, refs["export"], refs["quantize"], reuse, config.convert)
            refs["evaluate"] = evaluate_task(root, version, config.evaluate, refs["convert"], refs["data"], workers,
                                             refs["export"], refs["quantize"])
            duel = duel_task(root, version, refs["evaluate"], refs["data"], reuse)  # None: nothing released yet
            if duel is not None:
                refs["duel"] = duel
            refs["gate"] = gate_task(root, version, config.gate, refs["evaluate"], duel, refs["quantize"])
            refs["report"] = report_task(root, version, refs.get("train", refs.get(SOURCE)), refs["evaluate"], refs["gate"],
                                         refs["quantize"], data=refs["data"], duel=duel)
            record = publish_task(root, version, config, refs)
        except Exception as exc:
            record_error(artifact_store, version, config, exc)
            raise
    return _published(artifact_store, version, record, refs)


def _published(artifact_store: ArtifactStore, version: VersionRef, record: dict, refs: dict[str, StageRef]) -> str:
    """Publish the run's report as a Prefect artifact; raise GateFailed unless the gate passed."""
    publish_report(version, record, artifact_store.alias(version.model, RELEASE),
                   artifact_store.verify_stage(refs["report"]))
    if record["status"] != "passed":
        failed = [Criterion(**criterion) for criterion in record["gate"]["criteria"] if not criterion["passed"]]
        failure = GateFailed(version.model, version.version, [criterion.describe() for criterion in failed])
        failure.version_ref = version
        raise failure
    return version.version
