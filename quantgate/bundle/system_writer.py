"""Filling an OCR system's bundle: each component's convert-stage FP32 and INT8 ONNX models (what the system's
evaluation ran), its preprocessing record and the names of its outputs (classes, characters) in a folder of its
name, the system stage's system.json, the system's card, then the sealed manifest.

The writer's staging folder, verification and rename (writer.py) are the same as for one model's bundle.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from quantgate.bundle.copying import copy_stage_file, created_by, task_keys, task_records, written
from quantgate.bundle.latencies import LATENCIES, PER_PAGE, latency_record
from quantgate.bundle.layout import (
    BUNDLE_FILE,
    DEFAULT_RUNTIME,
    DETECTOR,
    FORMAT,
    FORMAT_VERSION,
    MODEL_CARD_JSON,
    MODEL_CARD_MD,
    OCR_SYSTEM,
    PRECISIONS,
    PREPROCESSING_FILE,
    SYSTEM_FILE,
    SYSTEM_STAGE,
    TEXT_DETECTION,
)
from quantgate.bundle.manifest import canonical_json, sealed_json, write_new
from quantgate.bundle.sources import CannotBundle, VersionSources
from quantgate.bundle.system_card import build_system_card, render_system_markdown
from quantgate.bundle.system_sources import SystemSources
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.stages.data.outputs import DATASET_FILE

MODEL_NAMES = {"fp32": FP32_FILE, "int8": INT8_FILE}
# What the system's evaluation reads from a component's dataset.json; the bundle carries it in preprocessing.json,
# so the two must agree (stages/system/evaluate.py builds the components' specs from these keys).
SPEC_KEYS = {TEXT_DETECTION: ("transforms", "postprocess")}
DEFAULT_SPEC_KEYS = ("transforms",)


def fill_system(staging: Path, sources: SystemSources) -> None:
    """Copy every component's models and records, system.json, the card, then the sealed manifest."""
    files, origins, components = {}, {}, {}
    for role, part in sources.components.items():
        if part is None:
            components[role] = None
            continue
        _check_records_agree(sources, role, part)
        models = {}
        for precision in PRECISIONS:
            path = f"{role}/{MODEL_NAMES[precision]}"
            files[path] = copy_stage_file(staging, part, "convert", MODEL_NAMES[precision], path)
            origins[path] = {"model": part.ref.model, "version": part.ref.version, "stage": "convert",
                             "file": MODEL_NAMES[precision], "sha256": files[path]["sha256"]}
            models[precision] = path
        files.update(task_records(staging, part, role))
        named = (sources.system.get("components") or {}).get(role) or {}
        components[role] = {
            "model": part.ref.model, "version": part.ref.version, **task_keys(part.task, role), "task": part.task,
            # how the system's evaluation read this model's outputs (system.json), else its own record's
            "outputs": named.get("outputs") or part.output_kind,
            "models": models, "preprocessing": f"{role}/{PREPROCESSING_FILE}",
            "input": {"shape": part.metrics("data").get("input_shape"), "dtype": "float32", "layout": "NCHW"},
            "gate": {"passed": True, "verdict": part.verdict},
        }
    files[SYSTEM_FILE] = copy_stage_file(staging, sources, SYSTEM_STAGE, SYSTEM_FILE, SYSTEM_FILE)
    created_at = datetime.now(UTC).isoformat(timespec="seconds")
    lineage = {"store": str(sources.store.root), "model": sources.ref.model, "version": sources.ref.version,
               "version_record_sha256": sources.record.get("record_sha256"), "decision": sources.decision,
               "stages": sources.record.get("stages", {}),
               "components": {role: None if part is None else {
                   "model": part.ref.model, "version": part.ref.version,
                   "version_record_sha256": part.record.get("record_sha256"), "stages": part.record.get("stages", {})}
                   for role, part in sources.components.items()},
               "sources": origins}
    card = build_system_card(sources, files, {role: entry["models"] for role, entry in components.items() if entry},
                             lineage, created_at)
    files[MODEL_CARD_JSON] = written(staging / MODEL_CARD_JSON, canonical_json(card))
    files[MODEL_CARD_MD] = written(staging / MODEL_CARD_MD, render_system_markdown(card).encode("utf-8"))
    used = [entry for entry in components.values() if entry]
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "task": OCR_SYSTEM,
        "created_at": created_at, "created_by": created_by(),
        "model": sources.ref.model, "version": sources.ref.version,
        "components": components,
        "drop_score": float(sources.system["drop_score"]), "cls_thresh": float(sources.system["cls_thresh"]),
        "system": SYSTEM_FILE,
        # Every runtime runs the same ONNX files; per precision, every component's, in pipeline order.
        "runtimes": {runtime: {precision: [entry["models"][precision] for entry in used] for precision in PRECISIONS}
                     for runtime in sources.runtimes},
        "default_runtime": DEFAULT_RUNTIME if DEFAULT_RUNTIME in sources.runtimes else sources.runtimes[0],
        # The system's evaluation ran every model at batch 1 with this many threads; predict does the same.
        "evaluated_with": {"batch_size": 1, "threads": _threads(sources)},
        # Per runtime, the all-FP32 and all-INT8 systems' median time per page, as its evaluation measured them.
        LATENCIES: latency_record(card["evaluation"]["runtimes"], card["evaluation"].get("cpu"), _threads(sources), 1,
                                  PER_PAGE),
        "model_card": [MODEL_CARD_MD, MODEL_CARD_JSON],
        "gate": {"passed": True, "verdict": sources.verdict, "runtimes": card["gate"]["runtimes"]},
        "lineage": lineage,
        "files": files,
    }
    write_new(staging / BUNDLE_FILE, sealed_json(manifest))


def _threads(sources: SystemSources) -> int | None:
    """The threads the system's evaluation ran with (else the detector's own evaluation's)."""
    evaluated = sources.manifests.get("evaluate") or {}
    threads = (evaluated.get("config") or {}).get("threads") or evaluated.get("metrics", {}).get("threads")
    if threads is None:
        threads = (sources.components[DETECTOR].manifests["evaluate"].get("config") or {}).get("threads")
    return threads


def _check_records_agree(sources: SystemSources, role: str, part: VersionSources) -> None:
    """The component's preprocessing record holds what the system's evaluation read from its dataset.json.

    Raises:
        CannotBundle: they differ, so the bundle would not prepare inputs as the system was judged.
    """
    spec, record = part.read_json("data", DATASET_FILE), part.preprocessing()
    differing = [key for key in SPEC_KEYS.get(part.task, DEFAULT_SPEC_KEYS) if spec.get(key) != record.get(key)]
    if differing:
        raise CannotBundle(f"cannot bundle {sources.label}: its {role} {part.label} records other "
                           f"{', '.join(differing)} in its data stage's dataset.json than in its preprocessing "
                           "record; run `quantgate fsck`, and gate the component again")
