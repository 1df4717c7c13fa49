"""The `release` flow: train (or take in a trained model) → export → quantize → convert → evaluate → duel
(the release on the same test samples) → gate → report → publish.

Run it with `quantgate run`, as a script, or from a deployment in prefect.yaml.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from quantgate.artifacts import (
    ArtifactStore,
    CheckpointRef,
    StageRef,
    VersionRef,
    open_store,
)
from quantgate.config import GatePolicy, PipelineConfig
from quantgate.flows.duel import score_release_now
from quantgate.flows.publishing import (
    provenance,
    publish_judged,
    published,
    record_error,
    rejudged,
)
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
from quantgate.memory import memory_budget
from quantgate.policy.release_duel import release_criteria
from quantgate.policy.runtimes import RUNTIMES, gate_runtimes, runtime_headlines
from quantgate.settings import resolve_store_root
from quantgate.stages.evaluate import check_runtimes
from quantgate.stages.evaluate.outputs import TASK, headline_keys
from quantgate.stages.quantize.outputs import SEARCH
from quantgate.stages.source import check_trained_model
from quantgate.stages.source.outputs import INPUT_SPEC, ORIGIN, OUTPUT_SPEC, PARAMETERS, TRAINED_HERE
from quantgate.stages.train.outputs import AMP, ARCHITECTURE, SCALER
from quantgate.tasks import CLASSIFICATION
from quantgate.terminal import RUN_LOGGER


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


def scored_release_criteria(store: ArtifactStore, version: VersionRef, record: dict, policy: GatePolicy):
    """How the release flow judges a version against a newer release: the release is scored on this version's
    test samples (flows/duel.py), then judged on the paired numbers in every runtime."""

    def criteria_against(release: str | None, problem: str) -> tuple[list, dict]:
        runtimes, primary = gate_runtimes(record["gate"])
        task = (record.get("metrics") or {}).get(TASK) or CLASSIFICATION
        with tempfile.TemporaryDirectory() as scratch:
            evidence = score_release_now(store, store.stage_ref(version, "data"),
                                         store.stage_ref(version, "evaluate"), release, Path(scratch), problem)
            return release_criteria(policy, evidence, runtimes, primary, task)

    return criteria_against


def publish_record(store: ArtifactStore, version: VersionRef, record: dict, policy: GatePolicy) -> dict:
    """Finalize the version with `record` and move `latest` and `release`; return the record as finalized.

    `release` is read and, if it moved since the gate read it, the new release is scored and the record
    judged again (`publishing.rejudged`), all outside the alias lock (scoring takes seconds); see `publish_judged`.
    """
    criteria_against = scored_release_criteria(store, version, record, policy)
    return publish_judged(store, version, lambda release, problem: rejudged(record, release, problem,
                                                                            criteria_against))


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
        MemoryRefused: one sample of `config.trained_model` cannot be calibrated within the memory budget, or
            evaluate.latency_batch_size cannot be timed within it (before a version exists); later, in the stage
            that finds it, a loop whose one sample (or fixed batch) does not fit.
        BadMemoryBudget: QUANTGATE_MEMORY_GB is not a positive number (before a version exists).
    """
    if is_flow_run_process():  # a worker's process for this run only: what it starts ends with it
        keep_children()
    root = str(resolve_store_root(store))
    artifact_store = open_store(root)
    budget = memory_budget()  # a bad QUANTGATE_MEMORY_GB in the worker's environment: exit 2, nothing stored
    get_run_logger().info("memory budget %.1f GB (%s): batch sizes left unset are chosen to fit it",
                          budget.bytes / 1e9, budget.source)
    if config.task == OCR_SYSTEM:  # stored components judged end to end: nothing is trained or quantized
        version, record, refs = run_system(config, root, reuse)
        return published(artifact_store, version, record, refs)
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
            refs["convert"] = convert_task(root, version, refs["export"], refs["quantize"], reuse, config.convert,
                                           refs["data"])
            refs["evaluate"] = evaluate_task(root, version, config.evaluate, refs["convert"], refs["data"], workers,
                                             refs["export"], refs["quantize"])
            duel = duel_task(root, version, refs["evaluate"], refs["data"], reuse)  # None: nothing released yet
            if duel is not None:
                refs["duel"] = duel
            refs["gate"] = gate_task(root, version, config.gate, refs["evaluate"], duel, refs["quantize"])
            refs["report"] = report_task(root, version, refs.get("train", refs.get(SOURCE)), refs["evaluate"], refs["gate"],
                                         refs["quantize"], data=refs["data"], duel=duel, earlier=dict(refs))
            record = publish_task(root, version, config, refs)
        except Exception as exc:
            record_error(artifact_store, version, config, exc)
            raise
    return published(artifact_store, version, record, refs)
