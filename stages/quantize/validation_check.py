"""The gate's accuracy rules, applied on the validation split: how the INT8 search judges a candidate
without looking at the test split the gate will read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.stages.evaluate.accuracy import predict
from quantgate.stages.evaluate.latency import session
from quantgate.stages.gate.decision import decide

# The gate's criteria that a validation split can answer; the rest (bootstrap interval on the test
# split, regression against the release, staleness) belong to the gate alone.
VALIDATION_CRITERIA = ("accuracy_drop_pts", "agreement", "int8_top1_pct", "speedup")


class ValidationCheck:
    """FP32 logits on the validation split, computed once; `score` compares an INT8 model with them."""

    def __init__(self, fp32_onnx: Path, images: np.ndarray, labels: np.ndarray, threads: int, batch_size: int):
        if len(images) == 0:
            raise ValueError("the validation split is empty; set data.validation_fraction")
        self.images, self.labels, self.threads, self.batch_size = images, labels, threads, batch_size
        self.fp32_logits = predict(session(fp32_onnx, threads), images, batch_size)
        self.fp32_top1_pct = float(100 * np.mean(self.fp32_logits.argmax(axis=1) == labels))

    def score(self, int8_onnx: Path) -> dict:
        """Top-1 of both models, their agreement, and how far INT8's logits are from FP32's."""
        logits = predict(session(int8_onnx, self.threads), self.images, self.batch_size)
        int8_top1 = float(100 * np.mean(logits.argmax(axis=1) == self.labels))
        return {
            "validation_samples": int(len(self.labels)),
            "fp32_top1_pct": self.fp32_top1_pct,
            "int8_top1_pct": int8_top1,
            "accuracy_drop_pts": self.fp32_top1_pct - int8_top1,
            "agreement": float(np.mean(logits.argmax(axis=1) == self.fp32_logits.argmax(axis=1))),
            # relative logit error: ranks candidates that tie on accuracy (small splits often do)
            "logit_error": float(np.mean((logits - self.fp32_logits) ** 2) / (np.var(self.fp32_logits) + 1e-12)),
        }


def policy_failures(policy: GatePolicy, metrics: dict) -> list[str]:
    """The validation criteria `metrics` misses under `policy`, described as the gate would."""
    decision = decide(policy, metrics)
    return [criterion.describe() for criterion in decision.criteria
            if criterion.name in VALIDATION_CRITERIA and not criterion.passed]
