"""An OCR system's model card: which stored versions it is made of, how each passed its own gate, how the system read
the test pages end to end, and the system's own gate, as one dict (model_card.json) and as Markdown (model_card.md).

Every number comes from the versions' records; nothing is measured again here.
"""

from __future__ import annotations

from quantgate.bundle.layout import OCR_SYSTEM
from quantgate.bundle.model_card import EVALUATION_COLUMNS, gate_by_runtime, gate_lines, number, table
from quantgate.bundle.sources import VersionSources
from quantgate.bundle.system_sources import SystemSources
from quantgate.stages.evaluate.outputs import HMEAN_DROP
from quantgate.stages.system.outputs import E2E_DROP

# The system's evaluation keeps every task's keys: *_top1_pct hold the end-to-end line accuracy.
SYSTEM_EVALUATION_COLUMNS = (("fp32_top1_pct", "FP32 e2e lines %"), ("int8_top1_pct", "INT8 e2e lines %"),
                             (E2E_DROP, "drop pts"), ("fp32_cer_pct", "FP32 CER %"),
                             ("int8_cer_pct", "INT8 CER %"), ("cer_increase_pts", "CER increase pts"),
                             *EVALUATION_COLUMNS[3:])
HEADLINE_KEYS = ("fp32_top1_pct", "int8_top1_pct", "accuracy_delta_pts", "agreement", "fp32_cer_pct",
                 "int8_cer_pct", HMEAN_DROP, "cer_increase_pts", "latency_ms_p50_fp32", "latency_ms_p50_int8",
                 "speedup_int8_vs_fp32")


def component_card(part: VersionSources) -> dict:
    """One component: which version, its task and input, and the numbers its own gate judged (primary runtime)."""
    data, evaluated = part.metrics("data"), part.metrics("evaluate")
    primary = evaluated.get("primary_runtime") or part.runtimes[0]
    measured = (evaluated.get("runtimes") or {}).get(primary, evaluated)
    return {"model": part.ref.model, "version": part.ref.version, "task": part.task,
            "input_shape": data.get("input_shape"), "verdict": part.verdict,
            "accuracy_metric": evaluated.get("accuracy_metric", "top-1"), "primary_runtime": primary,
            "evaluation": {key: measured.get(key) for key in HEADLINE_KEYS if key in measured},
            "data": {"dataset": data.get("dataset"), "fingerprint_sha256": data.get("fingerprint_sha256"),
                     "samples_test": data.get("samples_test")},
            "version_record_sha256": part.record.get("record_sha256")}


def build_system_card(sources: SystemSources, files: dict[str, dict], models: dict[str, dict], lineage: dict,
                      created_at: str) -> dict:
    """The card of a system bundle holding `files` ({path: {sha256, bytes}}) and each component's `models`
    ({role: {precision: path}}), as JSON-ready data."""
    evaluated = sources.metrics("evaluate") if "evaluate" in sources.manifests else {}
    data = sources.metrics("data") if "data" in sources.manifests else {}
    primary = evaluated.get("primary_runtime") or sources.runtimes[0]
    criteria, verdicts = gate_by_runtime(sources.gate, sources.runtimes, primary)
    sizes = {role: {precision: files[path]["bytes"] for precision, path in paths.items()}
             for role, paths in models.items()}
    return {
        "created_at": created_at,
        "system": {"name": sources.ref.model, "version": sources.ref.version, "task": OCR_SYSTEM,
                   "drop_score": sources.system.get("drop_score"), "cls_thresh": sources.system.get("cls_thresh"),
                   "finalized_at": sources.record.get("finalized_at")},
        "components": {role: component_card(part) if part else None for role, part in sources.components.items()},
        "data": {"dataset": data.get("dataset"), "fingerprint_sha256": data.get("fingerprint_sha256"),
                 "pages": data.get("samples_test"), "source": data.get("source")},
        "evaluation": {"primary_runtime": primary, "test_pages": evaluated.get("test_samples"),
                       "accuracy_metric": evaluated.get("accuracy_metric"), "cpu": evaluated.get("cpu"),
                       "config": (sources.manifests.get("evaluate") or {}).get("config"),
                       "runtimes": {runtime: dict((evaluated.get("runtimes") or {}).get(runtime, {}))
                                    for runtime in sources.runtimes}},
        "gate": {"passed": True, "verdict": sources.verdict, "decision": sources.decision,
                 "policy": sources.gate.get("policy") or sources.record.get("config", {}).get("gate"),
                 "criteria": criteria, "runtimes": verdicts},
        "sizes_bytes": sizes,
        "lineage": lineage,
    }


def render_system_markdown(card: dict) -> str:
    """model_card.md of a system: its summary, components, evaluation, gate, sizes and lineage."""
    system, evaluation = card["system"], card["evaluation"]
    primary = evaluation["runtimes"].get(evaluation["primary_runtime"], {})
    parts = [role for role, part in card["components"].items() if part]
    summary = [f"# {system['name']} {system['version']}", "",
               (f"An OCR system ({' -> '.join(parts)}; PaddleOCR's drop_score {system['drop_score']}, cls_thresh "
                f"{system['cls_thresh']}) reading pages end to end: all-INT8 {number(primary.get('int8_top1_pct'))} "
                f"% of the labelled lines read exactly, all-FP32 {number(primary.get('fp32_top1_pct'))} %, on "
                f"{number(evaluation['test_pages'])} test pages. Gate passed ({card['gate']['verdict']}). Bundled "
                f"{card['created_at']}.")]
    components = ["## Components", "", *table(
        ("component", "version", "task", "its gate", "FP32 %", "INT8 %", "metric"),
        [(role, f"{part['model']}/{part['version']}", part["task"], part["verdict"],
          part["evaluation"].get("fp32_top1_pct"), part["evaluation"].get("int8_top1_pct"), part["accuracy_metric"])
         for role, part in card["components"].items() if part])]
    rows = [(runtime, *(record.get(key) for key, _ in SYSTEM_EVALUATION_COLUMNS))
            for runtime, record in evaluation["runtimes"].items()]
    evaluated = [f"## Evaluation (all-INT8 vs all-FP32 system, {number(evaluation['test_pages'])} test pages; "
                 f"primary runtime {evaluation['primary_runtime']})", "",
                 *table(("runtime", *(title for _, title in SYSTEM_EVALUATION_COLUMNS)), rows)]
    sizes = ["## Sizes (bytes in this bundle)", "",
             *table(("component", "FP32", "INT8"), [(role, each["fp32"], each["int8"])
                                                     for role, each in card["sizes_bytes"].items()])]
    lineage = card["lineage"]
    origins = ["## Lineage", "",
               (f"- store {lineage['store']}, {lineage['model']}/{lineage['version']}, version record sha256 "
                f"`{lineage['version_record_sha256']}`"),
               *[f"- {stage} manifest sha256 `{digest}`" for stage, digest in sorted(lineage["stages"].items())],
               *[f"- {role}: {part['model']}/{part['version']}, version record sha256 `{part['version_record_sha256']}`"
                 for role, part in lineage["components"].items() if part],
               *[f"- {path} <- {source['model']}/{source['version']} {source['stage']}/{source['file']}"
                 for path, source in sorted(lineage["sources"].items())]]
    sections = (summary, components, evaluated, gate_lines(card["gate"]), sizes, origins)
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"
