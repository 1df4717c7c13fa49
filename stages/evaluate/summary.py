"""The evaluate stage's manifest metrics: one entry per runtime, the primary runtime's numbers at the top level."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort

from quantgate.config import EvaluateConfig
from quantgate.runtimes.forms import PADDLE2ONNX_INT8, ModelForm
from quantgate.stages.evaluate.outputs import (
    ACCURACY_METRIC,
    CPU,
    FP32_MODEL,
    INT8_MODEL,
    INT8_OPS,
    LIBRARY,
    PREDICTIONS_FILE_KEY,
    PRIMARY_RUNTIME,
    RUNTIMES,
    SPEEDUP_BATCH1,
    TASK,
    latency_key,
)
from quantgate.tasks import Task


@dataclass(frozen=True)
class Measured:
    """What one runtime measured: the task's predictions by model name ("fp32", "int8", ...), the largest
    |FP32 - INT8| output difference, latency stats by model name at the latency batch and at batch 1."""

    forms: dict[str, ModelForm]
    predicted: dict[str, np.ndarray]  # task.predict of each model's logits: class indices, or decoded strings
    max_abs_logit_diff: float | None  # None where the task compares no outputs (a detector's maps)
    latency: dict[str, dict[str, float]]
    latency_batch1: dict[str, dict[str, float]]
    int8_ops: dict
    library: str
    predictions_file: str
    details: dict = field(default_factory=dict)  # runtime-specific records (kernel path, compiled precision)


def runtime_numbers(measured: Measured, references: np.ndarray, task: Task) -> dict:
    """The task's numbers (`task.compare`: accuracy, agreement, per-class or CER), logit difference, latency and
    speedup (at the evaluated batch and at batch 1) and sizes of one runtime's FP32 and INT8 models."""
    int8_pred = measured.predicted["int8"]
    latency = measured.latency
    fp32_bytes, int8_bytes = measured.forms["fp32"].bytes, measured.forms["int8"].bytes
    numbers = {
        **task.compare(references, measured.predicted["fp32"], int8_pred),
        # None where the task keeps no outputs (a detector's maps): its boxes are compared instead
        "max_abs_logit_diff": measured.max_abs_logit_diff,
        **{latency_key(stat, name): value for name, stats in latency.items() for stat, value in stats.items()},
        "speedup_int8_vs_fp32": latency["fp32"]["p50"] / latency["int8"]["p50"],
        **{latency_key(stat, name, batch1=True): value for name, stats in measured.latency_batch1.items()
           for stat, value in stats.items()},
        SPEEDUP_BATCH1: measured.latency_batch1["fp32"]["p50"] / measured.latency_batch1["int8"]["p50"],
        "model_bytes_fp32": fp32_bytes,
        "model_bytes_int8": int8_bytes,
        "size_ratio_int8_vs_fp32": int8_bytes / fp32_bytes,
    }
    if PADDLE2ONNX_INT8 in measured.predicted:
        reference = measured.predicted[PADDLE2ONNX_INT8]
        scores = task.scores(references, reference)
        numbers.update({
            "paddle2onnx_int8_top1_pct": scores["top1_pct"],
            **({"paddle2onnx_int8_cer_pct": scores["cer_pct"]} if "cer_pct" in scores else {}),
            "agreement_int8_vs_paddle2onnx_int8": float(np.mean(int8_pred == reference)),
            "speedup_paddle2onnx_int8_vs_fp32": latency["fp32"]["p50"] / latency[PADDLE2ONNX_INT8]["p50"],
            "model_bytes_paddle2onnx_int8": measured.forms[PADDLE2ONNX_INT8].bytes,
        })
    return numbers


def runtime_entry(measured: Measured, numbers: dict) -> dict:
    """metrics["runtimes"][runtime]: its numbers, the model forms it ran, its INT8 kernels and its library."""
    fp32, int8 = measured.forms["fp32"], measured.forms["int8"]
    return {**numbers, FP32_MODEL: fp32.description, INT8_MODEL: int8.description,
            "fp32_source": fp32.source(), "int8_source": int8.source(), INT8_OPS: measured.int8_ops,
            LIBRARY: measured.library, PREDICTIONS_FILE_KEY: measured.predictions_file, **measured.details}


def stage_metrics(measured: dict[str, Measured], primary: str, references: np.ndarray, task: Task,
                  config: EvaluateConfig, latency_batch_size: int, cpu: dict) -> dict:
    """The manifest metrics: the primary runtime's numbers at the top level (as before runtimes existed),
    every runtime's entry under "runtimes", the primary runtime's name, the task and the CPU record."""
    numbers = {runtime: runtime_numbers(m, references, task) for runtime, m in measured.items()}
    return {
        "test_samples": len(references),
        TASK: task.name,
        ACCURACY_METRIC: task.accuracy_name,
        **numbers[primary],
        "latency_batch_size": int(latency_batch_size),  # the *_batch1 latencies are at batch 1
        "latency_repeats": config.latency_repeats,
        "ort_threads": config.threads,  # every runtime's thread count; the name predates the other runtimes
        "onnxruntime": ort.__version__,
        PRIMARY_RUNTIME: primary,
        RUNTIMES: {runtime: runtime_entry(m, numbers[runtime]) for runtime, m in measured.items()},
        CPU: cpu,
    }
