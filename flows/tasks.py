"""Prefect tasks: each runs one stage into the store (`stage_runs.run_stage`) and hands the next task a verified
StageRef.

Tasks pass store references (paths and manifest digests), never arrays, models or sessions; each says what of its
config and inputs decides the stage's output (its reuse key) and which stage function does the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect import get_run_logger, task

from quantgate.artifacts import ArtifactStore, CheckpointRef, StageRef, VersionRef, open_store
from quantgate.config import (
    ConvertConfig,
    DataConfig,
    EvaluateConfig,
    GatePolicy,
    PipelineConfig,
    QuantizeConfig,
    TrainConfig,
)
from quantgate.flows.code_version import code_digest
from quantgate.flows.duel import (
    DUEL,
    current_release,
    duel_settings,
    prediction_cache,
    release_model,
    run_duel,
    stored_duel,
)
from quantgate.flows.evidence import gate_evidence
from quantgate.flows.publishing import memory_of
from quantgate.flows.stage_runs import STAGE_TASK, run_stage
from quantgate.flows.warm_start import INIT_DIGEST, WarmStart, read_init_weights
from quantgate.int8.lower_int8 import Lowering
from quantgate.stages.convert import convert, converter_environment, this_cpus_weight_bits
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, OPSET, PADDLE2ONNX_INT8_FILE
from quantgate.stages.data import (
    BoxPlan,
    FolderPlan,
    HashState,
    TextPlan,
    data_roots,
    plan_image_folders,
    plan_text_boxes,
    plan_text_lines,
    prepare_data,
    without_locations,
)
from quantgate.stages.data.outputs import READ_FROM, SAMPLES_CALIBRATION
from quantgate.stages.duel.outputs import PAIRED_SAMPLES, PROBLEM, RELEASE_SCORING_S, STATUS
from quantgate.stages.evaluate import evaluate
from quantgate.stages.export import export, export_program
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.gate import gate
from quantgate.stages.quantize import calibration_batches, calibration_environment, quantize, search_quantization
from quantgate.stages.quantize.outputs import CALIBRATED_BY, SEARCH
from quantgate.stages.report import report
from quantgate.stages.report.outputs import REPORT_FILE
from quantgate.stages.source import CheckedModel, import_model
from quantgate.stages.source.outputs import OUTPUTS as SOURCE_OUTPUTS
from quantgate.stages.train import CheckpointBytes, train
from quantgate.stages.train.outputs import (
    AMP,
    ARCHITECTURE,
    INIT_FROM,
    NECK,
    REFERENCE_LOGITS_FILE,
    SCALER,
    STEPS_FILE,
    VISUALDL_DIR,
    WEIGHTS_FILE,
)

FILE_HASH_STATE = "file-hashes"  # the store's cache kind holding the data stage's file-hash state
SOURCE = SOURCE_OUTPUTS.stage


def check_calibration_size(store_root: str, data: StageRef, config: QuantizeConfig) -> None:
    """Refuse, before any training, a calibration request larger than the calibration split.

    Raises:
        QuantizationError: quantize.batch_nums x batch_size exceeds the calibration samples.
    """
    samples = open_store(store_root).read_manifest(data)["metrics"][SAMPLES_CALIBRATION]
    calibration_batches(samples, config)


@task(name="data", **STAGE_TASK)
def data_task(store_root: str, version: VersionRef, config: DataConfig, reuse: bool = True,
              training: bool = True) -> StageRef:
    """Split the dataset; an image folder or text lines are scanned into a file table first (nothing is
    stored if they are bad). Without `training` (a model trained elsewhere) nothing is split off to train."""
    plan: list[FolderPlan | TextPlan | BoxPlan] = []
    planners = {"image_folder": plan_image_folders, "text_lines": plan_text_lines, "text_boxes": plan_text_boxes}

    def scan() -> dict:
        # Files live outside the store and may change under the same path: they are scanned every run
        # (hashes of unchanged files come from this machine's hash state), and the data stage is reused only
        # when the scanned content - every file's bytes, place under its root and label - is the recorded one,
        # wherever the roots lie (another worker's mount of the same files reuses it).
        if config.dataset not in planners:
            return {}
        state = HashState(open_store(store_root).cache(FILE_HASH_STATE).state_file())
        plan.append(planners[config.dataset](config, state, training=training))
        return {"data_content_sha256": plan[0].content_sha256}

    settings = config.model_dump(mode="json") | ({} if training else {"training": False})  # earlier digests kept
    # The manifest says where this run read the files (the later stages read them there); the digest does not.
    located = {READ_FROM: data_roots(config)} if config.dataset in planners else {}
    return run_stage(
        store_root, version, "data", settings | located, {},
        lambda _, out: prepare_data(config, out, plan[0] if plan else None, training=training), reuse,
        environment=scan, digest_config=without_locations(config, settings),
    )


def user_code(architecture: str) -> bool:
    """Whether `architecture` names a user's entry point ("module:factory"), code the digest cannot see."""
    return ":" in architecture


def checkpoint_sink(store: ArtifactStore, version: VersionRef, stage: str) -> Callable[[str], object]:
    """A stage's per-epoch checkpoints, each committed atomically into the version's checkpoints area."""

    @contextmanager
    def sink(name: str) -> Iterator[Path]:
        with store.write_checkpoint(version, stage, name) as writer:
            yield writer.dir

    return sink


@task(name="train", **STAGE_TASK)
def train_task(
    store_root: str, version: VersionRef, config: TrainConfig, data: StageRef, resume: CheckpointRef | None = None,
    reuse: bool = True, num_workers: int = 0, warm_start: WarmStart | None = None,
) -> StageRef:
    """Train under AMP and keep the float32 master weights; checkpoint every epoch, or continue `resume`, or
    start from `warm_start`'s weights (train.init_from, resolved by the flow before the version existed)."""
    store = open_store(store_root)
    # Read once and hashed: training loads these very bytes (no pickle in them), never the files again.
    saved = CheckpointBytes(resume.name, store.read_checkpoint(resume)) if resume is not None else None

    def work(dirs: dict[str, Path], out: Path):
        # Read here, not before run_stage: a reused stage never loads them (nor unpickles a .pdparams).
        init = read_init_weights(store, warm_start) if warm_start is not None else None
        result = train(config, dirs["data"], out, checkpoints=checkpoint_sink(store, version, "train"),
                       resume_from=saved, num_workers=num_workers, init_weights=init)
        if resume is not None:
            result.metrics["resumed_from"] = {"model": resume.model, "version": resume.version,
                                              "checkpoint": resume.name, "manifest_sha256": resume.manifest_sha256}
        if warm_start is not None:
            result.metrics[INIT_FROM] = {**warm_start.record(), **result.metrics[INIT_FROM]}
        return result

    # A resumed or warm-started run starts from other weights: the checkpoint or the init weights are inputs.
    started_from = {"resume_checkpoint_sha256": resume.manifest_sha256} if resume is not None else {}
    if warm_start is not None:
        started_from[INIT_DIGEST] = warm_start.sha256
    ref = run_stage(store_root, version, "train", config.model_dump(mode="json"), {"data": data}, work,
                    reuse and not user_code(config.architecture), environment=started_from)
    metrics = store.read_manifest(ref)["metrics"]
    amp = metrics[AMP]
    get_run_logger().info("AMP requested %s/%s, effective: %s (%s)",
                          config.amp.level, config.amp.dtype, amp["effective"], amp["reason"])
    scaler = metrics[SCALER]
    get_run_logger().info("loss scale %s -> %s (min %s), %d of %d steps skipped",
                          scaler["initial_scale"], scaler["final_scale"], scaler["min_scale"],
                          scaler["skipped_steps"], scaler["steps"])
    if metrics.get(INIT_FROM):
        init = metrics[INIT_FROM]
        get_run_logger().info("started from %s %s (sha256 %s…), %d key(s) fresh", init["source"],
                              init["version"] or init["path"], init["sha256"][:12], len(init["fresh_keys"]))
    return ref


@task(name="source", **STAGE_TASK)
def source_task(store_root: str, version: VersionRef, config: PipelineConfig, checked: CheckedModel,
                data: StageRef, reuse: bool = True) -> StageRef:
    """Take in the model trained elsewhere, byte for byte, in the train stage's place (its files' sha256 are
    in the inputs digest: another export of the same path is another source)."""
    settings = {"trained_model": config.trained_model.model_dump(mode="json"), "task": config.task}
    return run_stage(
        store_root, version, SOURCE, settings, {"data": data},
        lambda dirs, out: import_model(config, dirs["data"], out), reuse,
        environment={"model_files": checked.files},
    )


@task(name="export", **STAGE_TASK)
def export_program_task(store_root: str, version: VersionRef, source: StageRef, data: StageRef,
                        reuse: bool = True, num_workers: int = 0) -> StageRef:
    """Keep the imported FP32 program as the pipeline's FP32 model, run once on a test batch (a PIR one converted)."""
    return run_stage(store_root, version, "export", {"from": SOURCE}, {"source": source, "data": data},
                     lambda dirs, out: export_program(dirs["source"], dirs["data"], out, num_workers), reuse,
                     environment=lambda: converter_environment(open_store(store_root).read_manifest(source)["metrics"]))


@task(name="export", **STAGE_TASK)
def export_task(store_root: str, version: VersionRef, trained: StageRef, data: StageRef,
                reuse: bool = True, num_workers: int = 0) -> StageRef:
    """Save the FP32 inference model and check it against training."""
    metrics = open_store(store_root).read_manifest(trained)["metrics"]
    architecture, neck = metrics[ARCHITECTURE], metrics.get(NECK)
    settings = {"architecture": architecture, **({"neck": neck} if neck else {})}  # classification keys unchanged
    return run_stage(
        store_root, version, "export", settings, {"train": trained, "data": data},
        lambda dirs, out: export(
            dirs["train"] / WEIGHTS_FILE, dirs["train"] / REFERENCE_LOGITS_FILE,
            dirs["data"], architecture, out, num_workers, neck=neck or "conv",
        ),
        reuse and not user_code(architecture),
    )


def search_summary(store: ArtifactStore, quantized: StageRef | None) -> dict | None:
    """The INT8 search's summary in the quantize manifest; None for strategy 'single' (or no quantize ref)."""
    return store.read_manifest(quantized)["metrics"].get(SEARCH) if quantized is not None else None


@task(name="quantize", **STAGE_TASK)
def quantize_task(
    store_root: str, version: VersionRef, config: QuantizeConfig, exported: StageRef, data: StageRef,
    reuse: bool = True, policy: GatePolicy | None = None, evaluate_config: EvaluateConfig | None = None,
    num_workers: int = 0, convert_config: ConvertConfig | None = None,
) -> StageRef:
    """PaddleSlim post-training INT8 on the calibration split: one recipe ('single'), or the accuracy-aware search
    judged by `policy` on the validation split ('search'); both lowered (AdaRound, trials) as `convert_config` will."""
    weight_bits = this_cpus_weight_bits().bits  # the grid the weights are rounded to, once, from FP32

    def batch_environment() -> dict:  # a lowered batch the scales depend on is part of what decides them
        store = open_store(store_root)
        return calibration_environment(config, lambda: (store.verify_stage(exported), store.verify_stage(data)))

    grids = (convert_config or ConvertConfig()).hardswish_grids  # the lowering AdaRound fits through, if it runs
    if config.strategy == "single":
        return run_stage(
            store_root, version, "quantize", {**config.model_dump(mode="json"), "int8_weight_bits": weight_bits,
                                              **({"hardswish_grids": grids} if config.rounding == "adaptive" else {})},
            {"export": exported, "data": data},
            lambda dirs, out: quantize(config, dirs["export"], MODEL_FILE, PARAMS_FILE, dirs["data"], out,
                                       num_workers=num_workers, weight_bits=weight_bits, hardswish_grids=grids),
            reuse, environment=batch_environment,
        )
    policy, evaluate_config = policy or GatePolicy(), evaluate_config or EvaluateConfig()
    convert_config = convert_config or ConvertConfig()
    store = open_store(store_root)
    # The search's verdict depends on the policy it was judged by, and on the lowering its trials were judged in
    # (the convert stage's, on this machine): both are part of the stage's config.
    lowering = Lowering(weight_bits, convert_config.hardswish_grids)
    stage_config = {**config.model_dump(mode="json"), "policy": policy.model_dump(mode="json"),
                    "evaluate": evaluate_config.model_dump(mode="json"), "int8_weight_bits": lowering.weight_bits,
                    "hardswish_grids": lowering.hardswish_grids}
    # Keyed by the code version too (an edit to the search makes earlier entries unreachable); --no-reuse uses none.
    cache = store.cache("quantize-search", salt=code_digest("quantize")) if reuse else None
    ref = run_stage(
        store_root, version, "quantize", stage_config, {"export": exported, "data": data},
        lambda dirs, out: search_quantization(config, policy, evaluate_config, dirs["export"],
                                              dirs["data"], out, cache=cache, num_workers=num_workers,
                                              lowering=lowering),
        reuse, environment=batch_environment,
    )
    search = search_summary(store, ref)
    get_run_logger().info(
        "INT8 search: %s; kept trial %d of %d (%s), %d FP32 layer(s), validation drop %.2f pts, %.2fx, %.0f s",
        "passed" if search["passed"] else "NOTHING PASSED", search["kept_trial"], search["trials"],
        search["recipe"]["algo"], len(search["float_layers"]), search["validation"]["accuracy_drop_pts"],
        search["speedup_int8_vs_fp32"], search["wall_s"])
    return ref


@task(name="convert", **STAGE_TASK)
def convert_task(store_root: str, version: VersionRef, exported: StageRef, quantized: StageRef,
                 reuse: bool = True, config: ConvertConfig | None = None, data: StageRef | None = None) -> StageRef:
    """paddle2onnx for both models, then INT8 lowered to onnxruntime's integer kernels (7-bit weights on a CPU
    whose INT8 kernels saturate with 8: `weight_range`; `config.hardswish_grids`: `affine_absorption`), its
    integer ops checked on the data's first calibration samples."""
    config = config or ConvertConfig()
    weight_bits = this_cpus_weight_bits()
    if weight_bits.bits != 8:
        get_run_logger().info("convert: INT8 weights in %d bits: %s", weight_bits.bits, weight_bits.why)
    return run_stage(
        store_root, version, "convert",
        {"opset": OPSET, "int8_weight_bits": weight_bits.bits, "hardswish_grids": config.hardswish_grids},
        {"export": exported, "quantize": quantized, **({"data": data} if data is not None else {})},
        lambda dirs, out: convert(
            dirs["export"], dirs["quantize"], MODEL_FILE, PARAMS_FILE, out, weight_bits, config.hardswish_grids,
            dirs.get("data")),
        reuse, environment=converter_environment(open_store(store_root).read_manifest(exported)["metrics"]),
    )


@task(name="evaluate", **STAGE_TASK)
def evaluate_task(
    store_root: str, version: VersionRef, config: EvaluateConfig, converted: StageRef, data: StageRef,
    num_workers: int = 0, exported: StageRef | None = None, quantized: StageRef | None = None,
) -> StageRef:
    """FP32 vs INT8 in every listed runtime on the test split (never reused: latency belongs to this run's machine).

    Paddle Inference runs the Paddle models themselves: the exported FP32 and PaddleSlim's INT8 program.
    """
    paddle_inputs = {"export": exported, "quantize": quantized} if exported is not None and quantized is not None else {}
    return run_stage(
        store_root, version, "evaluate", config.model_dump(mode="json"),
        {"convert": converted, "data": data, **paddle_inputs},
        lambda dirs, out: evaluate(
            config, dirs["convert"] / FP32_FILE, dirs["convert"] / INT8_FILE, dirs["data"], out,
            paddle2onnx_int8_onnx=dirs["convert"] / PADDLE2ONNX_INT8_FILE, num_workers=num_workers,
            paddle_fp32_dir=dirs.get("export"), paddle_int8_dir=dirs.get("quantize"),
        ),
        reuse=False,
    )


@task(name="duel", **STAGE_TASK)
def duel_task(store_root: str, version: VersionRef, evaluated: StageRef, data: StageRef,
              reuse: bool = True) -> StageRef | None:
    """Score the current release on this version's unseen test samples in every runtime, paired with this
    version's predictions; None when nothing was released yet (never reused: `release` is the store's current one).

    Another run may move `release` before this one publishes: publish scores the new release (outside the
    alias lock) and judges the comparison again.
    """
    store = open_store(store_root)
    release, problem = current_release(store, version.model)
    if release is None:
        get_run_logger().info("duel: no release yet (the comparison with the release is not applicable)")
        return None
    released, release_refs = release_model(store, version.model, release, problem)
    manifest = store.read_manifest(evaluated)
    settings = {"release": release, **duel_settings(manifest.get("config") or {})}
    inputs = {"data": data, "evaluate": evaluated, **{f"release_{stage}": ref for stage, ref in release_refs.items()}}
    cache = prediction_cache(store) if reuse else None
    ref = run_stage(
        store_root, version, DUEL, settings, inputs,
        lambda dirs, out: run_duel(released, dirs["data"], dirs["evaluate"], manifest["metrics"], settings, out,
                                   cache),
        reuse=False,
    )
    metrics = store.read_manifest(ref)["metrics"]
    get_run_logger().info("duel with release %s: %s, %s paired samples, %.2f s scoring the release%s", release,
                          metrics[STATUS], metrics.get(PAIRED_SAMPLES), metrics.get(RELEASE_SCORING_S) or 0.0,
                          f" ({metrics[PROBLEM]})" if metrics.get(PROBLEM) else "")
    return ref


@task(name="gate", **STAGE_TASK)
def gate_task(store_root: str, version: VersionRef, policy: GatePolicy, evaluated: StageRef,
              duel: StageRef | None = None, quantized: StageRef | None = None) -> StageRef:
    """Apply the release policy to the evaluation, its provenance, the duel with the release and the INT8
    search's verdict (never reused: the duel is against the store's current release)."""
    store = open_store(store_root)
    metrics, predictions, stale = gate_evidence(store, evaluated)
    search = search_summary(store, quantized)
    release = stored_duel(store, duel) if duel is not None else None
    inputs = {"evaluate": evaluated, **({"quantize": quantized} if quantized is not None else {}),
              **({DUEL: duel} if duel is not None else {})}
    return run_stage(
        store_root, version, "gate", policy.model_dump(mode="json"), inputs,
        lambda _, out: gate(policy, metrics, out, predictions, release, stale, search), reuse=False,
    )


@task(name="report", **STAGE_TASK)
def report_task(store_root: str, version: VersionRef, trained: StageRef, evaluated: StageRef, gated: StageRef,
                quantized: StageRef | None = None, data: StageRef | None = None,
                duel: StageRef | None = None, earlier: dict[str, StageRef] | None = None) -> StageRef:
    """report.md and its pictures, stored in the version; `trained` is the train stage, or the source stage of
    a model trained elsewhere; `data` defaults to this version's data stage; `earlier`, the stages whose memory
    the report shows."""
    store = open_store(store_root)
    memory = memory_of({stage: store.read_manifest(ref) for stage, ref in (earlier or {}).items()})
    train_metrics, evaluation, gate_record = (store.read_manifest(ref)["metrics"] for ref in (trained, evaluated, gated))
    int8 = store.read_manifest(quantized)["metrics"] if quantized is not None else {}  # its search, who calibrated
    duel_record = store.read_manifest(duel)["metrics"] if duel is not None else None
    data = data or store.stage_ref(version, "data")
    report_dir = store.stage_dir(version, "report")
    imported = trained.stage == SOURCE  # a model trained elsewhere: no steps, no VisualDL
    where = {
        "version": store.version_location(version),
        "report": str(report_dir / REPORT_FILE),
        "pictures": str(report_dir / "*.png"),
        **({} if imported else {"VisualDL": f"visualdl --logdir {store.stage_dir(version, trained.stage) / VISUALDL_DIR}"}),
    }
    return run_stage(
        store_root, version, "report", {}, {"data": data, trained.stage: trained, "evaluate": evaluated, "gate": gated,
                                            **({DUEL: duel} if duel is not None else {})},
        lambda dirs, out: report(f"{version.model} {version.version}", evaluation, gate_record, train_metrics,
                                 None if imported else dirs["train"] / STEPS_FILE, where, out, int8.get(SEARCH),
                                 data_dir=dirs["data"], evaluate_dir=dirs["evaluate"], duel_dir=dirs.get(DUEL),
                                 duel_record=duel_record, memory=memory, calibrated_by=int8.get(CALIBRATED_BY)),
        reuse=False,  # the report names this version's paths
    )
