"""The run's Prefect artifacts: the version's report.md as markdown, FP32 vs INT8 and the runtimes as tables."""

from __future__ import annotations

import re
from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from quantgate.artifacts import VersionRef
from quantgate.policy.runtimes import INT8_OPS, LIBRARY, PRIMARY_RUNTIME, RUNTIMES, primary_runtime
from quantgate.stages.evaluate import outputs as headline
from quantgate.stages.report.outputs import REPORT_FILE

# ![alt](file.png): the Prefect UI cannot load files from the store, so images become their paths.
IMAGE_LINK = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def artifact_key(model: str, kind: str = "release") -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{model}-{kind}").strip("-")


def metrics_table(version: VersionRef, record: dict, release: str | None) -> list[dict]:
    metrics = record["metrics"]
    primary = record["gate"].get(PRIMARY_RUNTIME) or primary_runtime(record.get(RUNTIMES) or ())
    rows = [
        {"metric": f"{metrics.get(headline.ACCURACY_METRIC, 'top-1 accuracy')} (%)",
         "fp32": f"{metrics[headline.FP32_TOP1]:.2f}", "int8": f"{metrics[headline.INT8_TOP1]:.2f}",
         "note": f"delta {metrics[headline.ACCURACY_DELTA]:+.2f} pts"},
        *([{"metric": "character error rate (%)", "fp32": f"{metrics[headline.FP32_CER]:.2f}",
            "int8": f"{metrics[headline.INT8_CER]:.2f}", "note": f"increase {metrics[headline.CER_INCREASE]:+.2f} pts"}]
          if headline.CER_INCREASE in metrics else []),
        {"metric": "prediction agreement", "fp32": "", "int8": f"{metrics[headline.AGREEMENT]:.4f}",
         "note": "INT8 vs FP32"},
        {"metric": "latency p50 (ms/batch)", "fp32": f"{metrics[headline.LATENCY_P50_FP32]:.3f}",
         "int8": f"{metrics[headline.LATENCY_P50_INT8]:.3f}", "note": f"{primary} CPU"},
        {"metric": "model size (bytes)", "fp32": str(metrics[headline.MODEL_BYTES_FP32]),
         "int8": str(metrics[headline.MODEL_BYTES_INT8]), "note": ""},
    ]
    for criterion in record["gate"]["criteria"]:
        measured = "missing" if criterion["measured"] is None else f"{criterion['measured']:.4g}"
        verdict = criterion.get("verdict") or ("pass" if criterion["passed"] else "fail")
        rows.append({"metric": f"gate: {criterion['name']}", "fp32": "", "int8": measured,
                     "note": f"{criterion['comparison']} {criterion['threshold']:g}: "
                             f"{'FAIL' if verdict == 'fail' else verdict.replace('_', ' ')}"})
    rows.append({"metric": "version", "fp32": "", "int8": f"{version.model}/{version.version}",
                 "note": f"{record['status']}; release -> {release or 'none'}; {version.path}"})
    return rows


def _shown(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def runtimes_table(record: dict) -> list[dict]:
    """One row per runtime the version was evaluated in, side by side: accuracy, speed and its verdict."""
    rows = []
    for runtime, entry in (record.get(RUNTIMES) or {}).items():
        ops = entry.get(INT8_OPS) or {}
        counted = {"int8", "total_conv_matmul"} <= set(ops)
        rows.append({
            "runtime": runtime, "library": str(entry.get(LIBRARY, "")),
            "fp32 top-1 (%)": _shown(entry.get(headline.FP32_TOP1), ".2f"),
            "int8 top-1 (%)": _shown(entry.get(headline.INT8_TOP1), ".2f"),
            "delta (pts)": _shown(entry.get(headline.ACCURACY_DELTA), "+.2f"),
            "agreement": _shown(entry.get(headline.AGREEMENT), ".4f"),
            "p50 fp32 (ms)": _shown(entry.get(headline.LATENCY_P50_FP32), ".3f"),
            "p50 int8 (ms)": _shown(entry.get(headline.LATENCY_P50_INT8), ".3f"),
            "speedup": _shown(entry.get(headline.SPEEDUP), ".2f"),
            "int8 ops": f"{ops['int8']}/{ops['total_conv_matmul']}" if counted else "n/a",
            "verdict": "pass" if entry.get("passed") else "FAIL: " + ", ".join(entry.get("failed") or ["no verdict"]),
        })
    return rows


def markdown_for_prefect(report_dir: Path) -> str:
    """The stored report.md, with each embedded image replaced by its path in the store."""
    text = (Path(report_dir) / REPORT_FILE).read_text()
    return IMAGE_LINK.sub(lambda m: f"{m.group(1)}: `{Path(report_dir) / m.group(2)}`", text)


def publish_report(version: VersionRef, record: dict, release: str | None, report_dir: Path | None = None) -> None:
    """Publish the report as a Prefect markdown artifact, the FP32 vs INT8 table with the gate decision and,
    for a version evaluated in several runtimes, their results side by side."""
    description = f"quantgate {version.model}/{version.version}: gate {record['status']}"
    if report_dir is not None:
        create_markdown_artifact(markdown=markdown_for_prefect(report_dir) + f"\n`release` now points at: {release or 'none'}\n",
                                 key=artifact_key(version.model, "report"), description=description)
    create_table_artifact(table=metrics_table(version, record, release), key=artifact_key(version.model),
                          description=description)
    if len(record.get(RUNTIMES) or {}) > 1:
        create_table_artifact(table=runtimes_table(record), key=artifact_key(version.model, "runtimes"),
                              description=f"{description}; every listed runtime must pass")
