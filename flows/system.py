"""The OCR system's release: stored, passed models (detector → crops → classifier → recognizer) judged end to end.

pages (data) → system (which versions) → evaluate (every FP32/INT8 mix, every runtime) → gate (all-INT8 vs
all-FP32, and vs the system's release on the same pages) → report → publish. Nothing is quantized here: each
component was gated on its own, with its own data, pre-processing and dictionary, and is used as it passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import onnx
from prefect import get_run_logger, task

from quantgate.artifacts import RELEASE, ArtifactError, ArtifactStore, StageRef, VersionRef, open_store
from quantgate.config import DataConfig, GatePolicy, PipelineConfig
from quantgate.errors import BadInput
from quantgate.flows.code_version import code_digest
from quantgate.flows.publishing import memory_of, provenance, publish_judged, record_error, rejudged
from quantgate.flows.stage_runs import STAGE_TASK, run_stage
from quantgate.flows.tasks import FILE_HASH_STATE
from quantgate.ocr.combos import CLASSIFIER, COMPONENT_TASKS, DETECTOR, RECOGNIZER
from quantgate.policy.criterion import Criterion
from quantgate.policy.runtimes import RUNTIMES, runtime_headlines
from quantgate.stages.convert.outputs import FP32_FILE
from quantgate.stages.data import HashState, prepare_data
from quantgate.stages.data.outputs import DATASET_FILE
from quantgate.stages.evaluate.outputs import PADDLE_INFERENCE, headline_keys
from quantgate.stages.gate.outputs import RELEASE_REGRESSION
from quantgate.stages.source.outputs import OUTPUT_SPEC
from quantgate.stages.system import outputs as out
from quantgate.system_config import SystemConfig, split_component
from quantgate.tasks import CLASSIFICATION

COMPONENT_STAGES = ("data", "convert")
OCR_SYSTEM = out.TASK_NAME


class SystemProblem(BadInput):
    """The system's components cannot make a system: each problem named (exit 2, nothing stored)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("the OCR system cannot be assembled (" + f"{len(problems)} problem(s)); nothing was run "
                         "or stored:\n" + "\n".join(f"  - {problem}" for problem in problems))


@dataclass(frozen=True)
class ComponentRef:
    """A stored, passed version the system uses, and its stage refs."""

    model: str
    version: str
    task: str
    stages: dict[str, StageRef]
    outputs_are_probabilities: bool
    spec: dict  # its data stage's dataset.json, read once when the component was verified

    def record(self) -> dict:
        return {"model": self.model, "version": self.version, "task": self.task,
                "outputs": "probabilities" if self.outputs_are_probabilities else "logits"}


def _output_classes(onnx_file: Path) -> int | None:
    dims = onnx.load(str(onnx_file), load_external_data=False).graph.output[0].type.tensor_type.shape.dim
    return dims[-1].dim_value or None if dims else None


def _component(store: ArtifactStore, role: str, value: str, task_name: str) -> tuple[ComponentRef | None, list[str]]:
    setting = f"system.{role}"
    model, version = split_component(value)
    try:
        version = version or store.alias(model, RELEASE)
    except ArtifactError as exc:
        return None, [f"{setting}: {value!r}: {exc}"]
    if version is None:
        return None, [f"{setting}: {model!r} has no release in this store; gate it first (quantgate run with its "
                      "own config) or name a version, {model}/vN"]
    try:
        ref = store.version(model, version)
        record = store.version_record(ref)
    except ArtifactError as exc:
        return None, [f"{setting}: {model}/{version}: {exc}"]
    if record.get("status") != "passed":
        return None, [f"{setting}: {model}/{version} did not pass its gate (status {record.get('status')!r}); "
                      "only a passed version can be part of a system"]
    allowed, why = store.release_verdict(ref)  # a later `quantgate gate` decision counts too
    if not allowed:
        return None, [f"{setting}: {model}/{version} may not be released ({why}); decide it again with quantgate "
                      f"gate {version} --model {model}, or name another version"]
    try:
        stages = {stage: store.finalized_stage_ref(ref, stage) for stage in COMPONENT_STAGES}
        spec = json.loads((store.verify_stage(stages["data"]) / DATASET_FILE).read_text())
        source = record.get("source")
    except (ArtifactError, OSError, ValueError) as exc:
        return None, [f"{setting}: {model}/{version}: {exc}"]
    found = spec.get("task", CLASSIFICATION)  # the data stage's record says what the model was gated as
    if found != task_name:
        return None, [f"{setting}: {model}/{version} is a {found} model, not {task_name}; name a {task_name} model"]
    kind = ((source or {}).get(OUTPUT_SPEC) or {}).get("kind", "logits")
    return ComponentRef(model, version, task_name, stages, kind == "probabilities", spec), []


def _fit_problems(store: ArtifactStore, parts: dict[str, ComponentRef]) -> list[str]:
    """What does not fit: the recognizer's dictionary and its model, the classifier's classes."""
    problems = []
    recognizer = parts.get(RECOGNIZER)
    if recognizer is not None:
        characters = recognizer.spec["characters"]
        classes = _output_classes(store.verify_stage(recognizer.stages["convert"]) / FP32_FILE)
        if classes is not None and classes != len(characters) + 1:
            problems.append(f"system.recognizer: {recognizer.model}/{recognizer.version}'s dictionary has "
                            f"{len(characters)} characters (+1 CTC blank) but its model outputs {classes} scores per "
                            "position; gate the recognizer again with the dictionary it was trained with")
    classifier = parts.get(CLASSIFIER)
    if classifier is not None:
        spec = classifier.spec
        if "180" not in spec.get("classes", []) or spec.get("transforms", {}).get("resize_pad") is None:
            problems.append(f"system.classifier: {classifier.model}/{classifier.version} is not a text-direction "
                            f"classifier (classes {spec.get('classes')}, resize_pad "
                            f"{spec.get('transforms', {}).get('resize_pad')}); it needs classes '0' and '180' and "
                            "data.transforms.resize_pad, as PaddleOCR's cls")
    return problems


def resolve_system(store: ArtifactStore, system: SystemConfig) -> dict[str, ComponentRef | None]:
    """Every component as a passed version of the right task that fits the others.

    Raises:
        SystemProblem: naming each component that is missing, not passed, of the wrong task or does not fit.
    """
    parts, problems = {}, []
    for role, value in ((DETECTOR, system.detector), (CLASSIFIER, system.classifier),
                        (RECOGNIZER, system.recognizer)):
        if value is None:
            parts[role] = None
            continue
        parts[role], found = _component(store, role, value, COMPONENT_TASKS[role])
        problems += found
    if not problems:
        problems += _fit_problems(store, {role: part for role, part in parts.items() if part})
    if problems:
        raise SystemProblem(problems)
    return parts


def pages_config(config: PipelineConfig, detector: ComponentRef) -> DataConfig:
    """The system's pages read as its detector was gated: the detector's transforms and DB post-processing."""
    return config.data.model_copy(update={
        "transforms": config.data.transforms.model_validate(detector.spec["transforms"]),
        "det_postprocess": config.data.det_postprocess.model_validate(detector.spec["postprocess"])})


@task(name="data", **STAGE_TASK)
def pages_task(store_root: str, version: VersionRef, data: DataConfig, reuse: bool = True) -> StageRef:
    """The pages, every one in the test split (nothing is calibrated or trained here)."""
    from quantgate.stages.data import data_roots, plan_text_boxes, without_locations
    from quantgate.stages.data.outputs import READ_FROM

    plan = []

    def scan() -> dict:
        state = HashState(open_store(store_root).cache(FILE_HASH_STATE).state_file())
        plan.append(plan_text_boxes(data, state, all_test=True))
        return {"data_content_sha256": plan[0].content_sha256}  # the pages' bytes, wherever they are mounted

    settings = data.model_dump(mode="json") | {"system_pages": True}
    return run_stage(store_root, version, "data", settings | {READ_FROM: data_roots(data)}, {},
                     lambda _, folder: prepare_data(data, folder, plan[0], training=False), reuse, environment=scan,
                     digest_config=without_locations(data, settings))


def _inputs(parts: dict[str, ComponentRef | None]) -> dict[str, StageRef]:
    return {f"{role}_{stage}": ref for role, part in parts.items() if part for stage, ref in part.stages.items()}


@task(name="system", **STAGE_TASK)
def system_task(store_root: str, version: VersionRef, system: SystemConfig, parts: dict, reuse: bool = True
                ) -> StageRef:
    """Record which versions make the system (system.json)."""
    record = {"components": {role: part.record() if part else None for role, part in parts.items()},
              "drop_score": system.drop_score, "cls_thresh": system.cls_thresh}

    def work(_, folder: Path) -> object:
        (folder / out.SYSTEM_FILE).write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
        return type("Result", (), {"metrics": {"components": record["components"]}})()

    return run_stage(store_root, version, "system", record, _inputs(parts), work, reuse)


@task(name="evaluate", **STAGE_TASK)
def system_evaluate_task(store_root: str, version: VersionRef, config: PipelineConfig, parts: dict, pages: StageRef,
                         reuse: bool = True) -> StageRef:
    """Every FP32/INT8 mix of the system read on the pages in every runtime."""
    from quantgate.stages.system import Component, evaluate_system

    settings = {"runtimes": list(config.evaluate.runtimes), "threads": config.evaluate.threads,
                "drop_score": config.system.drop_score, "cls_thresh": config.system.cls_thresh,
                "components": {role: part.record() if part else None for role, part in parts.items()}}

    def work(dirs: dict[str, Path], folder: Path):
        components = {role: Component(json.loads((dirs[f"{role}_data"] / DATASET_FILE).read_text()),
                                      dirs[f"{role}_convert"], part.outputs_are_probabilities) if part else None
                      for role, part in parts.items()}
        return evaluate_system(components, dirs["data"], folder, tuple(config.evaluate.runtimes),
                               config.evaluate.threads, config.system.drop_score, config.system.cls_thresh)

    return run_stage(store_root, version, "evaluate", settings, {"data": pages, **_inputs(parts)}, work, reuse,
                     environment={"system_code_sha256": code_digest("system")})


def release_pairs(store: ArtifactStore, model: str, release: str | None, evaluate_dir: Path, metrics: dict,
                  data_dir: Path) -> dict[str, dict] | None:
    """Per runtime, this version's all-INT8 system against the release's on the pages both read (None: no
    release); a release whose reads cannot be had is recorded as a problem, which fails its criterion."""
    from quantgate.samples.reading import open_data
    from quantgate.stages.system import paired_release
    from quantgate.tasks.detection import ground_truth

    if release is None:
        return None
    try:
        ref = store.finalized_stage_ref(store.version(model, release), "evaluate")
        folder = store.verify_stage(ref)
        release_reads = json.loads((folder / out.READS_FILE).read_text(encoding="utf-8"))
        release_metrics = store.read_manifest(ref)["metrics"]
    except (ArtifactError, OSError, ValueError) as exc:
        return {runtime: {"paired_pages": 0, "problem": f"its reads cannot be read ({exc})"}
                for runtime in metrics[RUNTIMES]}
    reads = json.loads((evaluate_dir / out.READS_FILE).read_text(encoding="utf-8"))
    data = open_data(data_dir)
    truth = {row.sha256: ground_truth(row.label_name) for row in data.rows["test"]}
    return {runtime: paired_release(reads, metrics, release_reads, release_metrics, truth, runtime)
            for runtime in metrics[RUNTIMES]}


@task(name="gate", **STAGE_TASK)
def system_gate_task(store_root: str, version: VersionRef, policy: GatePolicy, evaluate: StageRef, pages: StageRef
                     ) -> StageRef:
    """The system's gate: all-INT8 vs all-FP32 per runtime, and vs the release on the same pages."""
    from quantgate.stages.system import gate_system

    store = open_store(store_root)
    release = store.alias(version.model, RELEASE)
    metrics = store.read_manifest(evaluate)["metrics"]

    def work(dirs: dict[str, Path], folder: Path):
        pairs = release_pairs(store, version.model, release, dirs["evaluate"], metrics, dirs["data"])
        record = gate_system(policy, metrics, folder, pairs, release)
        return type("Result", (), {"metrics": record})()

    return run_stage(store_root, version, "gate", policy.model_dump(mode="json") | {"release": release},
                     {"evaluate": evaluate, "data": pages}, work, reuse=False,
                     environment={"system_code_sha256": code_digest("system")})


@task(name="report", **STAGE_TASK)
def system_report_task(store_root: str, version: VersionRef, evaluate: StageRef, gate: StageRef, pages: StageRef,
                       system: StageRef) -> StageRef:
    from quantgate.stages.system import report_system

    store = open_store(store_root)
    manifests = {stage: store.read_manifest(ref) for stage, ref in
                 (("data", pages), ("system", system), ("evaluate", evaluate), ("gate", gate))}
    metrics, gate_record = manifests["evaluate"]["metrics"], manifests["gate"]["metrics"]
    components = manifests["system"]["metrics"]["components"]

    def work(dirs: dict[str, Path], folder: Path):
        reads = json.loads((dirs["evaluate"] / out.READS_FILE).read_text(encoding="utf-8"))
        return report_system(f"{version.model} {version.version}", metrics, gate_record, reads, dirs["data"], folder,
                             components, memory_of(manifests))

    return run_stage(store_root, version, "report", {}, {"evaluate": evaluate, "gate": gate, "data": pages,
                                                         "system": system}, work, reuse=False,
                     environment={"system_code_sha256": code_digest("system")})


def system_record(store: ArtifactStore, config: PipelineConfig, refs: dict[str, StageRef]) -> dict:
    """The system version's final record: as every version's, plus the components it is made of."""
    manifests = {stage: store.read_manifest(ref) for stage, ref in refs.items()}
    gate, evaluation = manifests["gate"]["metrics"], manifests["evaluate"]["metrics"]
    return {
        "status": "passed" if gate["passed"] else "failed", "gate": gate,
        "metrics": {key: evaluation[key] for key in headline_keys(evaluation)},
        RUNTIMES: runtime_headlines(evaluation, gate, headline_keys(evaluation)),
        "amp": None, "scaler": None, "architecture": None,
        "system": manifests["system"]["metrics"]["components"],
        **provenance(manifests, config),
    }


def stored_release_criteria(store: ArtifactStore, version: VersionRef, refs: dict[str, StageRef], policy: GatePolicy):
    """How the system flow judges a version against a newer release: both systems' stored reads of this version's
    pages, paired (no model runs); the release-regression criteria of every runtime."""

    def criteria_against(release: str | None, _problem: str) -> tuple[list[Criterion], dict | None]:
        from quantgate.stages.system import judge_system

        metrics = store.read_manifest(refs["evaluate"])["metrics"]
        pairs = release_pairs(store, version.model, release, store.verify_stage(refs["evaluate"]), metrics,
                              store.verify_stage(refs["data"]))
        fresh = judge_system(policy, metrics, pairs, release)
        moved = [Criterion(**c) for c in fresh["criteria"] if c["name"].endswith(RELEASE_REGRESSION)]
        return moved, fresh["release_duel"]

    return criteria_against


@task(name="publish", retries=0, cache_policy=None)
def system_publish_task(store_root: str, version: VersionRef, config: PipelineConfig, refs: dict) -> dict:
    """Finalize the version and move `latest`, and `release` (compare-and-set) only if the gate still passes
    against the release as it is when the move is made."""
    store = open_store(store_root)
    record = system_record(store, config, refs)
    criteria_against = stored_release_criteria(store, version, refs, config.gate)
    # The system's publish judges against the release as read; an unreadable alias is judged as none.
    judged = publish_judged(store, version, lambda release, _: rejudged(record, release, "", criteria_against))
    if judged["status"] == "passed":
        get_run_logger().info("release -> %s/%s", version.model, version.version)
    return judged


def run_system(config: PipelineConfig, root: str, reuse: bool = True) -> tuple[VersionRef, dict, dict[str, StageRef]]:
    """The system's release, stage by stage (the release flow runs it for task ocr_system).

    Raises:
        SystemProblem: the components cannot make a system (before a version exists).
        RuntimeUnavailable: a listed runtime is not installed (before a version exists).
    """
    from quantgate.stages.evaluate import check_runtimes

    check_runtimes(config.evaluate.runtimes)
    if PADDLE_INFERENCE in config.evaluate.runtimes:
        raise SystemProblem([f"evaluate.runtimes: {PADDLE_INFERENCE} is not offered for OCR systems (PP-OCRv4's "
                             "detector cannot run in its oneDNN INT8: conv2d_transpose); list onnxruntime and/or "
                             "openvino"])
    store = open_store(root)
    parts = resolve_system(store, config.system)
    pages = pages_config(config, parts[DETECTOR])
    version = store.create_version(config.model_name)
    get_run_logger().info("new version %s/%s in %s", version.model, version.version, root)
    with store.hold_version(version):
        try:
            refs: dict[str, StageRef] = {}
            refs["data"] = pages_task(root, version, pages, reuse)
            refs["system"] = system_task(root, version, config.system, parts, reuse)
            refs["evaluate"] = system_evaluate_task(root, version, config, parts, refs["data"], reuse)
            refs["gate"] = system_gate_task(root, version, config.gate, refs["evaluate"], refs["data"])
            refs["report"] = system_report_task(root, version, refs["evaluate"], refs["gate"], refs["data"],
                                                refs["system"])
            record = system_publish_task(root, version, config, refs)
        except Exception as exc:
            record_error(store, version, config, exc)
            raise
    return version, record, refs


def system_decision(store: ArtifactStore, ref: VersionRef, policy: GatePolicy, release: str | None) -> dict:
    """A stored system version decided again under `policy`, against `release` as it is now (`quantgate gate`)."""
    from quantgate.stages.system import judge_system

    evaluated = store.finalized_stage_ref(ref, "evaluate")
    metrics = store.read_manifest(evaluated)["metrics"]
    pairs = release_pairs(store, ref.model, release, store.verify_stage(evaluated), metrics,
                          store.verify_stage(store.finalized_stage_ref(ref, "data")))
    return judge_system(policy, metrics, pairs, release)
