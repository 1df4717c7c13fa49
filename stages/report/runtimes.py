"""The report's runtimes section: every runtime the version was evaluated in, side by side, and the CPU.

INT8 speed depends on the CPU's integer instructions (AVX-512 VNNI, AMX), so the flags the
evaluation found are shown next to the latencies they explain.
"""

from __future__ import annotations

import math

from quantgate.policy.runtimes import (
    CPU,
    DEFAULT_RUNTIME,
    INT8_MODEL,
    INT8_OPS,
    LIBRARY,
    PRIMARY_RUNTIME,
    gate_runtimes,
    runtime_entry,
)


def _num(value, spec: str, missing: str = "n/a") -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return missing
    return format(value, spec)


def _cell(value) -> str:
    return str(value).replace("|", "/").replace("\n", " ")


def primary_of(evaluation: dict) -> str:
    """The runtime the evaluation's top-level numbers belong to."""
    recorded = evaluation.get(PRIMARY_RUNTIME)
    return recorded if isinstance(recorded, str) else DEFAULT_RUNTIME


def runtime_rows(evaluation: dict, gate_record: dict) -> list[dict]:
    """Per judged runtime: its measured numbers (the top-level ones for the primary) and its verdict."""
    runtimes, primary = gate_runtimes(gate_record)
    verdicts = gate_record.get("runtimes") or {}
    rows = []
    for runtime in runtimes:
        entry = runtime_entry(evaluation, runtime)
        measured = {**entry, **evaluation} if runtime == primary else entry
        rows.append({"runtime": runtime, "measured": measured, "verdict": verdicts.get(runtime) or {}})
    return rows


def _ops(counts) -> str:
    if not isinstance(counts, dict) or "int8" not in counts:
        return "n/a"
    total = counts.get("total_conv_matmul")
    return f"{counts['int8']} of {total}" if total is not None else str(counts["int8"])


def _verdict(verdict: dict) -> str:
    if not verdict:
        return "not judged"
    if verdict.get("passed"):
        return "pass"
    return "**FAIL** (" + ", ".join(verdict.get("failed") or []) + ")"


def runtimes_table(evaluation: dict, gate_record: dict) -> list[str]:
    """Markdown lines of the runtimes side by side; none for a version judged in one runtime only."""
    rows = runtime_rows(evaluation, gate_record)
    if len(rows) < 2:
        return []
    header = ("| runtime | INT8 model | FP32 top-1 | INT8 top-1 | drop (pts) | agreement | p50 FP32 (ms) "
              "| p50 INT8 (ms) | speed-up | INT8 ops | verdict |")
    lines = ["## Runtimes side by side (every one must pass)", "", header,
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        m = row["measured"]
        fp32, int8 = m.get("fp32_top1_pct"), m.get("int8_top1_pct")
        drop = fp32 - int8 if _num(fp32, "g") != "n/a" and _num(int8, "g") != "n/a" else None
        library = f" ({_cell(m[LIBRARY])})" if m.get(LIBRARY) else ""
        lines.append(
            f"| {row['runtime']}{library} | {_cell(m.get(INT8_MODEL, 'n/a'))} | {_num(fp32, '.2f')} % "
            f"| {_num(int8, '.2f')} % | {_num(drop, '+.2f')} | {_num(m.get('agreement'), '.4f')} "
            f"| {_num(m.get('latency_ms_p50_fp32'), '.3f')} | {_num(m.get('latency_ms_p50_int8'), '.3f')} "
            f"| {_num(m.get('speedup_int8_vs_fp32'), '.2f')}x | {_ops(m.get(INT8_OPS))} | {_verdict(row['verdict'])} |")
    return lines


def slower_int8_lines(evaluation: dict, gate_record: dict) -> list[str]:
    """Where a runtime's INT8 ran slower than its own FP32 (at the evaluation's batch size or at batch 1), said
    plainly, with what the run knows of why: the CPU's integer instructions and the INT8 kernels it counted."""
    cpu = evaluation.get(CPU) if isinstance(evaluation.get(CPU), dict) else {}
    flags = set(cpu.get("flags") or [])
    batch = evaluation.get("latency_batch_size")
    notes = []
    for row in runtime_rows(evaluation, gate_record):
        m = row["measured"]
        for suffix, where in (("", f"batch {batch}" if batch else "the evaluation's batch size"), ("_batch1", "batch 1")):
            fp32, int8 = m.get(f"latency_ms_p50_fp32{suffix}"), m.get(f"latency_ms_p50_int8{suffix}")
            if _num(fp32, "g") == "n/a" or _num(int8, "g") == "n/a" or int8 <= fp32:
                continue
            known = []
            if not flags & {"avx512_vnni", "avx_vnni", "amx_int8"}:
                known.append("this CPU has no VNNI or AMX integer dot-product instructions")
            if isinstance(m.get(INT8_OPS), dict) and m[INT8_OPS].get("total_conv_matmul"):
                known.append(f"{_ops(m[INT8_OPS])} convolutions/matmuls ran as INT8 kernels")
                known += left_in_float(m[INT8_OPS])
            why = "; ".join(known) if known else "not established by this run"
            notes.append(f"- **{row['runtime']}: INT8 is slower than its FP32 at {where}** "
                         f"({_num(int8, '.3f')} vs {_num(fp32, '.3f')} ms p50). Known: {why}.")
    return ["INT8 slower than FP32:", "", *notes] if notes else []


def left_in_float(counts: dict) -> list[str]:
    """What the runtime left around its INT8 kernels, where it says (Paddle Inference's oneDNN passes do)."""
    conversions, floats = counts.get("conversions") or {}, counts.get("float_compute") or {}
    said = []
    if sum(conversions.values()):
        said.append(" and ".join(f"{count} {op}" for op, count in conversions.items())
                    + " ops convert between float and int8 at run time")
    if sum(floats.values()):
        shown = ", ".join(f"{count} {op}" for op, count in list(floats.items())[:4])
        more = ", ..." if len(floats) > 4 else ""
        said.append(f"{sum(floats.values())} ops still compute in float between them ({shown}{more})")
    return said


def cpu_line(evaluation: dict) -> list[str]:
    """One line naming the CPU and the integer-math flags it has; none if the evaluation did not record them."""
    cpu = evaluation.get(CPU)
    if not isinstance(cpu, dict):
        return []
    flags = ", ".join(cpu.get("flags") or []) or "none of AVX2 / AVX-512 / VNNI / AMX"
    amx = "AMX available" if cpu.get("amx") else "no AMX"
    return [f"CPU: {_cell(cpu.get('model', 'unknown'))}; flags: {flags} ({amx})"]


def latency_by_runtime(evaluation: dict, gate_record: dict) -> dict[str, tuple]:
    """{runtime: (p50 FP32 ms, p50 INT8 ms)} for the latency plot."""
    return {row["runtime"]: (row["measured"].get("latency_ms_p50_fp32"), row["measured"].get("latency_ms_p50_int8"))
            for row in runtime_rows(evaluation, gate_record)}


def pir_paddle_lines(evaluation: dict) -> list[str]:
    """A PIR program's FP32 reading in Paddle Inference (the evaluation's `paddle_inference_fp32`), whose INT8
    Paddle Inference cannot judge: what it read, how often as the primary runtime's FP32, and how it ran."""
    record = evaluation.get("paddle_inference_fp32")
    if not isinstance(record, dict):
        return []
    if not record.get("ran"):
        return [f"Paddle Inference (PIR program): its FP32 did not run on the test split: {_cell(record.get('why'))}"]
    how = "oneDNN" if record.get("onednn", True) else f"oneDNN off ({_cell(record.get('onednn_failure'))})"
    return [f"Paddle Inference (PIR program): FP32 {_num(record.get('top1_pct'), '.2f')} % on the test split, "
            f"predicting {_num(record.get('same_prediction_pct'), '.2f')} % of samples as {record.get('compared_with')}"
            f" does; {how}. Its INT8 is not applicable: quantgate calibrated the INT8 model on the ONNX graph, and "
            "there is no Paddle INT8 program."]
