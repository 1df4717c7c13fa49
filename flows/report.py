"""The run's Prefect artifact: FP32 vs INT8 side by side and the gate's verdict."""

from __future__ import annotations

import re

from prefect.artifacts import create_table_artifact

from quantgate.artifacts import VersionRef


def artifact_key(model: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{model}-release").strip("-")


def metrics_table(version: VersionRef, record: dict, release: str | None) -> list[dict]:
    metrics = record["metrics"]
    rows = [
        {"metric": "top-1 accuracy (%)", "fp32": f"{metrics['fp32_top1_pct']:.2f}",
         "int8": f"{metrics['int8_top1_pct']:.2f}", "note": f"delta {metrics['accuracy_delta_pts']:+.2f} pts"},
        {"metric": "prediction agreement", "fp32": "", "int8": f"{metrics['agreement']:.4f}", "note": "INT8 vs FP32"},
        {"metric": "latency p50 (ms/batch)", "fp32": f"{metrics['latency_ms_p50_fp32']:.3f}",
         "int8": f"{metrics['latency_ms_p50_int8']:.3f}", "note": "onnxruntime CPU"},
        {"metric": "model size (bytes)", "fp32": str(metrics["model_bytes_fp32"]),
         "int8": str(metrics["model_bytes_int8"]), "note": ""},
    ]
    for criterion in record["gate"]["criteria"]:
        measured = "missing" if criterion["measured"] is None else f"{criterion['measured']:.4g}"
        rows.append({"metric": f"gate: {criterion['name']}", "fp32": "", "int8": measured,
                     "note": f"{criterion['comparison']} {criterion['threshold']:g}: "
                             f"{'pass' if criterion['passed'] else 'FAIL'}"})
    rows.append({"metric": "version", "fp32": "", "int8": f"{version.model}/{version.version}",
                 "note": f"{record['status']}; release -> {release or 'none'}; {version.path}"})
    return rows


def publish_report(version: VersionRef, record: dict, release: str | None) -> None:
    """Publish the FP32 vs INT8 table with the gate decision as a Prefect table artifact."""
    create_table_artifact(
        table=metrics_table(version, record, release),
        key=artifact_key(version.model),
        description=f"quantgate {version.model}/{version.version}: gate {record['status']}",
    )
