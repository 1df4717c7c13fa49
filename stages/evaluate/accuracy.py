"""Evaluate stage: FP32 and INT8 ONNX models side by side in onnxruntime on the test split."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from quantgate.config import EvaluateConfig
from quantgate.stages.data.reading import StoredData, open_data
from quantgate.stages.evaluate.latency import measure, session
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE
from quantgate.stages.shared.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluateResult:
    predictions_file: str
    metrics: dict


def predict(model: ort.InferenceSession, images: np.ndarray, batch_size: int) -> np.ndarray:
    name = model.get_inputs()[0].name
    logits = [model.run(None, {name: images[i : i + batch_size]})[0] for i in range(0, len(images), batch_size)]
    return np.concatenate(logits)


def predict_split(models: dict[str, ort.InferenceSession], data: StoredData, split: str, batch_size: int,
                  num_workers: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Labels and every model's logits on `split`, read once, batch by batch (each batch feeds all models)."""
    labels, logits = [], {name: [] for name in models}
    progress = Progress(log, f"evaluate {split} batch", math.ceil(data.size(split) / batch_size), every_s=5.0)
    for step, (images, batch_labels) in enumerate(data.batches(split, batch_size, num_workers), start=1):
        labels.append(batch_labels)
        for name, model in models.items():
            logits[name].append(model.run(None, {model.get_inputs()[0].name: images})[0])
        progress.step(step)
    return np.concatenate(labels), {name: np.concatenate(values) for name, values in logits.items()}


def per_class_top1(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> list[float]:
    return [float(100.0 * np.mean(predicted[labels == k] == k)) if np.any(labels == k) else float("nan")
            for k in range(num_classes)]


def evaluate(
    config: EvaluateConfig, fp32_onnx: Path, int8_onnx: Path, data_dir: Path, out_dir: Path,
    paddle2onnx_int8_onnx: Path | None = None, num_workers: int = 0,
) -> EvaluateResult:
    """Top-1 of both models, their agreement, per-class accuracy, latency per batch, speedup and sizes.

    `paddle2onnx_int8_onnx`, when given, is paddle2onnx's own INT8 model (the same PaddleSlim scales
    before lowering): its accuracy, agreement and latency are reported beside, for comparison.
    """
    data = open_data(data_dir)
    onnx_files = {"fp32": fp32_onnx, "int8": int8_onnx}
    if paddle2onnx_int8_onnx is not None:
        onnx_files["paddle2onnx_int8"] = paddle2onnx_int8_onnx
    models = {name: session(path, config.threads) for name, path in onnx_files.items()}
    labels, logits = predict_split(models, data, "test", config.batch_size, num_workers)
    predicted = {name: values.argmax(axis=1) for name, values in logits.items()}
    fp32_logits, int8_logits = logits["fp32"], logits["int8"]
    fp32_pred, int8_pred = predicted["fp32"], predicted["int8"]
    log.info("evaluate: predicted %d test samples with %s; timing %d runs per model",
             len(labels), ", ".join(models), config.latency_repeats)
    np.savez(Path(out_dir) / PREDICTIONS_FILE, labels=labels, fp32_pred=fp32_pred, int8_pred=int8_pred,
             fp32_logits=fp32_logits, int8_logits=int8_logits)

    batch = data.array("test", limit=config.batch_size)[0]
    latency = measure(onnx_files, batch, config.threads, config.latency_repeats)
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
        "per_class_top1_pct_fp32": per_class_top1(labels, fp32_pred, data.num_classes),
        "per_class_top1_pct_int8": per_class_top1(labels, int8_pred, data.num_classes),
        "latency_batch_size": int(len(batch)),
        "latency_repeats": config.latency_repeats,
        "ort_threads": config.threads,
        **{f"latency_ms_{stat}_{name}": value for name, stats in latency.items() for stat, value in stats.items()},
        "speedup_int8_vs_fp32": latency["fp32"]["p50"] / latency["int8"]["p50"],
        "model_bytes_fp32": fp32_bytes,
        "model_bytes_int8": int8_bytes,
        "size_ratio_int8_vs_fp32": int8_bytes / fp32_bytes,
        "onnxruntime": ort.__version__,
    }
    if paddle2onnx_int8_onnx is not None:
        reference = predicted["paddle2onnx_int8"]
        metrics.update({
            "paddle2onnx_int8_top1_pct": float(100.0 * np.mean(reference == labels)),
            "agreement_int8_vs_paddle2onnx_int8": float(np.mean(int8_pred == reference)),
            "speedup_paddle2onnx_int8_vs_fp32": latency["fp32"]["p50"] / latency["paddle2onnx_int8"]["p50"],
            "model_bytes_paddle2onnx_int8": Path(paddle2onnx_int8_onnx).stat().st_size,
        })
    return EvaluateResult(PREDICTIONS_FILE, metrics)
