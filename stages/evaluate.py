"""Evaluate stage: FP32 and INT8 ONNX models side by side in onnxruntime on the test split."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from quantgate.config import EvaluateConfig
from quantgate.stages.data import load_splits

PREDICTIONS_FILE = "predictions.npz"
WARMUP_RUNS = 3


@dataclass(frozen=True)
class EvaluateResult:
    predictions_file: str
    metrics: dict


def session(onnx_file: Path, threads: int) -> ort.InferenceSession:
    """A CPU session with a fixed thread count, so latencies of the two models compare."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])


def predict(model: ort.InferenceSession, images: np.ndarray, batch_size: int) -> np.ndarray:
    name = model.get_inputs()[0].name
    logits = [model.run(None, {name: images[i : i + batch_size]})[0] for i in range(0, len(images), batch_size)]
    return np.concatenate(logits)


def latency_ms(model: ort.InferenceSession, batch: np.ndarray, repeats: int) -> dict[str, float]:
    """Median and 90th percentile wall time of one call on `batch`, after warm-up."""
    name = model.get_inputs()[0].name
    for _ in range(WARMUP_RUNS):
        model.run(None, {name: batch})
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.run(None, {name: batch})
        timings.append((time.perf_counter() - started) * 1e3)
    return {"p50": float(np.median(timings)), "p90": float(np.percentile(timings, 90))}


def per_class_top1(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> list[float]:
    return [float(100.0 * np.mean(predicted[labels == k] == k)) if np.any(labels == k) else float("nan")
            for k in range(num_classes)]


def evaluate(config: EvaluateConfig, fp32_onnx: Path, int8_onnx: Path, splits_path: Path, out_dir: Path) -> EvaluateResult:
    """Top-1 of both models, their agreement, per-class accuracy, latency per batch and file sizes."""
    splits = load_splits(splits_path)
    images, labels = splits.x_test, splits.y_test
    fp32, int8 = session(fp32_onnx, config.threads), session(int8_onnx, config.threads)
    fp32_logits = predict(fp32, images, config.batch_size)
    int8_logits = predict(int8, images, config.batch_size)
    fp32_pred, int8_pred = fp32_logits.argmax(axis=1), int8_logits.argmax(axis=1)
    np.savez(Path(out_dir) / PREDICTIONS_FILE, labels=labels, fp32_pred=fp32_pred, int8_pred=int8_pred,
             fp32_logits=fp32_logits, int8_logits=int8_logits)

    batch = images[: config.batch_size]
    fp32_latency = latency_ms(fp32, batch, config.latency_repeats)
    int8_latency = latency_ms(int8, batch, config.latency_repeats)
    fp32_top1 = float(100.0 * np.mean(fp32_pred == labels))
    int8_top1 = float(100.0 * np.mean(int8_pred == labels))
    fp32_bytes, int8_bytes = Path(fp32_onnx).stat().st_size, Path(int8_onnx).stat().st_size
    metrics = {
        "test_samples": int(len(labels)),
        "fp32_top1_pct": fp32_top1,
        "int8_top1_pct": int8_top1,
        "accuracy_delta_pts": int8_top1 - fp32_top1,
        "agreement": float(np.mean(fp32_pred == int8_pred)),
        "max_abs_logit_diff": float(np.abs(fp32_logits - int8_logits).max()),
        "per_class_top1_pct_fp32": per_class_top1(labels, fp32_pred, splits.num_classes),
        "per_class_top1_pct_int8": per_class_top1(labels, int8_pred, splits.num_classes),
        "latency_batch_size": int(len(batch)),
        "latency_repeats": config.latency_repeats,
        "ort_threads": config.threads,
        "latency_ms_p50_fp32": fp32_latency["p50"],
        "latency_ms_p90_fp32": fp32_latency["p90"],
        "latency_ms_p50_int8": int8_latency["p50"],
        "latency_ms_p90_int8": int8_latency["p90"],
        "speedup_int8_vs_fp32": fp32_latency["p50"] / int8_latency["p50"],
        "model_bytes_fp32": fp32_bytes,
        "model_bytes_int8": int8_bytes,
        "size_ratio_int8_vs_fp32": int8_bytes / fp32_bytes,
        "onnxruntime": ort.__version__,
    }
    return EvaluateResult(PREDICTIONS_FILE, metrics)
