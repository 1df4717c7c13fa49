"""The gate's reading of the stored test-split predictions: do they reproduce the evaluation's numbers,
and how sure is the INT8 - FP32 accuracy delta (a paired bootstrap).

Predictions are class indices (int64) or, for text recognition, decoded lines (numpy unicode arrays,
read with allow_pickle=False); correctness is equality with the reference either way, so the same
bootstrap runs on top-1 and on line accuracy. For text the character error rates are recomputed too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

from quantgate.stages.evaluate.outputs import FP32_CER, INT8_CER, TASK
from quantgate.tasks import CLASSIFICATION, TASK_NAMES, TEXT_DETECTION, TEXT_RECOGNITION, scorer
from quantgate.tasks.text import character_error_rate_pct

CONFIDENCE = 0.95
# Recomputed numbers are compared with the recorded ones to this tolerance (the same sums in another order).
TOLERANCE = 1e-9


@dataclass(frozen=True)
class DeltaInterval:
    """Paired bootstrap interval of the INT8 - FP32 accuracy delta (top-1 or line accuracy), in points."""

    delta_pts: float
    low_pts: float
    high_pts: float
    confidence: float
    resamples: int
    seed: int
    samples: int
    method: str = "percentile"


def paired_bootstrap_delta(labels: np.ndarray, fp32_pred: np.ndarray, int8_pred: np.ndarray,
                           resamples: int, seed: int, task: str = CLASSIFICATION) -> DeltaInterval:
    """95 % percentile interval of the INT8 - FP32 accuracy delta, resampling test samples in pairs.

    Each test sample keeps its FP32 and INT8 score (`task`'s per_sample: equality with its label for a
    class or a whole text line; a page's hmean for detection, so there the interval is that of the mean
    per-page hmean, close to but not the pooled hmean) together, so the interval reflects how often the two
    models disagree on the same samples, not two independent accuracies.

    Raises:
        ValueError: fewer than two samples, or arrays of different lengths.
    """
    labels, fp32_pred, int8_pred = (np.asarray(a).reshape(-1) for a in (labels, fp32_pred, int8_pred))
    if not len(labels) == len(fp32_pred) == len(int8_pred) or len(labels) < 2:
        raise ValueError(f"need >= 2 paired predictions, got {len(labels)}, {len(fp32_pred)}, {len(int8_pred)}")
    scoring = scorer(task)
    per_sample = 100.0 * (scoring.per_sample(labels, int8_pred) - scoring.per_sample(labels, fp32_pred))
    result = bootstrap((per_sample,), np.mean, n_resamples=resamples, confidence_level=CONFIDENCE,
                       method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return DeltaInterval(float(per_sample.mean()), low, high, CONFIDENCE, resamples, seed, len(labels))


def _recorded(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _kind_problems(labels: np.ndarray, predicted: tuple[np.ndarray, ...], task: str) -> list[str]:
    """Why the stored arrays are not the predictions of `task` (text lines are strings, classes integers)."""
    strings = [array.dtype.kind == "U" for array in (labels, *predicted)]
    if task == TEXT_RECOGNITION and not all(strings):
        return ["the evaluation is text_recognition but its stored predictions are not text lines"]
    if task == TEXT_DETECTION and not all(strings):
        return ["the evaluation is text_detection but its stored predictions are not boxes (JSON per page)"]
    if task == CLASSIFICATION and any(strings):
        return ["the evaluation is classification but its stored predictions are not class indices"]
    return []


def check_predictions(predictions_file: Path, metrics: dict, task: str, resamples: int,
                      seed: int) -> tuple[DeltaInterval | None, list[str]]:
    """The delta's interval, and problems if the stored predictions do not reproduce the metrics of `task`."""
    try:
        with np.load(predictions_file, allow_pickle=False) as stored:
            labels, fp32_pred, int8_pred = stored["labels"], stored["fp32_pred"], stored["int8_pred"]
    except (OSError, KeyError, ValueError) as exc:
        return None, [f"predictions {Path(predictions_file).name} unreadable ({exc})"]
    problems = _kind_problems(labels, (fp32_pred, int8_pred), task)
    if problems:
        return None, problems
    def accuracy_pct(references: np.ndarray, predicted: np.ndarray) -> float:
        return scorer(task).scores(references, predicted)["top1_pct"]

    checks = [("fp32_top1_pct", fp32_pred, accuracy_pct), ("int8_top1_pct", int8_pred, accuracy_pct)]
    if task == TEXT_RECOGNITION:
        checks += [(FP32_CER, fp32_pred, character_error_rate_pct), (INT8_CER, int8_pred, character_error_rate_pct)]
    for key, predicted, measure in checks:
        recorded, recomputed = _recorded(metrics, key), measure(labels, predicted)
        if recorded is not None and abs(recorded - recomputed) > TOLERANCE:
            problems.append(f"{key} {recorded:.4f} does not match the stored predictions ({recomputed:.4f})")
    try:
        interval = paired_bootstrap_delta(labels, fp32_pred, int8_pred, resamples, seed, task)
    except ValueError as exc:
        return None, [*problems, f"cannot bootstrap the delta: {exc}"]
    return interval, problems


def task_of_metrics(metrics: dict) -> tuple[str, list[str]]:
    """The task an evaluation records (classification when it records none, as before tasks existed), and
    why it cannot be judged. Fails closed: an evaluation with CER numbers is judged as text."""
    task = metrics.get(TASK, CLASSIFICATION)
    if task not in TASK_NAMES:
        return TEXT_RECOGNITION, [f"the evaluation records task {task!r}, which this gate cannot judge"]
    if task == CLASSIFICATION and any(key in metrics for key in (FP32_CER, INT8_CER)):
        return TEXT_RECOGNITION, ["the evaluation records classification but has character error rates"]
    return task, []
