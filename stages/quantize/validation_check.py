"""The gate's accuracy rules, applied on the validation split: how the INT8 search judges a candidate
without looking at the test split the gate will read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.stages.data.reading import StoredData
from quantgate.stages.evaluate.latency import session
from quantgate.stages.gate.decision import decide

# The gate's criteria that a validation split can answer; the rest (bootstrap interval on the test
# split, regression against the release, staleness) belong to the gate alone.
VALIDATION_CRITERIA = ("accuracy_drop_pts", "agreement", "int8_top1_pct", "speedup")


class ValidationCheck:
    """FP32 logits on the validation split, computed once; `score` compares an INT8 model with them.

    The images are streamed batch by batch for every model scored (image folders are decoded again each
    time); only per-image bookkeeping (labels, FP32 logits) is kept, so memory does not grow with the split.
    """

    def __init__(self, fp32_onnx: Path, data: StoredData, threads: int, batch_size: int, num_workers: int = 0):
        """Raises: ValueError: the validation split is empty; DataChanged: an image changed since the data stage."""
        self.labels = data.labels("validation")
        if len(self.labels) == 0:
            raise ValueError("the validation split is empty; set data.validation_fraction")
        self.data, self.threads, self.batch_size, self.num_workers = data, threads, batch_size, num_workers
        self.fp32_logits = np.concatenate([logits for logits, _ in self._batch_logits(fp32_onnx)])
        self.fp32_predicted = self.fp32_logits.argmax(axis=1)
        self.fp32_top1_pct = float(100 * np.mean(self.fp32_predicted == self.labels))
        self._fp32_logit_variance = float(np.var(self.fp32_logits))

    def _batch_logits(self, onnx_file: Path):
        """(logits, row slice) of each validation batch, in order."""
        model = session(onnx_file, self.threads)
        name, start = model.get_inputs()[0].name, 0
        for images, _ in self.data.batches("validation", self.batch_size, self.num_workers):
            yield model.run(None, {name: images})[0], slice(start, start + len(images))
            start += len(images)

    def score(self, int8_onnx: Path) -> dict:
        """Top-1 of both models, their agreement, and how far INT8's logits are from FP32's."""
        correct = agreeing = 0
        squared_error = 0.0
        for logits, rows in self._batch_logits(int8_onnx):
            predicted = logits.argmax(axis=1)
            correct += int(np.sum(predicted == self.labels[rows]))
            agreeing += int(np.sum(predicted == self.fp32_predicted[rows]))
            squared_error += float(np.sum((logits - self.fp32_logits[rows]) ** 2, dtype=np.float64))
        count = len(self.labels)
        int8_top1 = 100 * correct / count
        return {
            "validation_samples": int(count),
            "fp32_top1_pct": self.fp32_top1_pct,
            "int8_top1_pct": int8_top1,
            "accuracy_drop_pts": self.fp32_top1_pct - int8_top1,
            "agreement": agreeing / count,
            # relative logit error: ranks candidates that tie on accuracy (small splits often do)
            "logit_error": squared_error / self.fp32_logits.size / (self._fp32_logit_variance + 1e-12),
        }


def policy_failures(policy: GatePolicy, metrics: dict) -> list[str]:
    """The validation criteria `metrics` misses under `policy`, described as the gate would."""
    decision = decide(policy, metrics)
    return [criterion.describe() for criterion in decision.criteria
            if criterion.name in VALIDATION_CRITERIA and not criterion.passed]
