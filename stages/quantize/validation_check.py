"""The gate's accuracy rules, applied on the validation split: how the INT8 search judges a candidate
without looking at the test split the gate will read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.stages.data.reading import StoredData
from quantgate.stages.evaluate.latency import session
from quantgate.stages.evaluate.outputs import TASK
from quantgate.stages.gate.decision import decide

# The gate's criteria that a validation split can answer; the rest (bootstrap interval on the test
# split, regression against the release, staleness) belong to the gate alone. cer_increase_pts is
# judged for text recognition only (the gate has no such criterion for classification).
VALIDATION_CRITERIA = ("accuracy_drop_pts", "cer_increase_pts", "agreement", "int8_top1_pct", "speedup")


class ValidationCheck:
    """FP32 outputs on the validation split, computed once; `score` compares an INT8 model with them.

    The images are streamed batch by batch for every model scored (image folders are decoded again each
    time); only per-image bookkeeping (references, FP32 outputs and predictions) is kept. Outputs are
    decoded by the data's task (argmax, or greedy CTC for text), as the evaluate stage decodes them.
    """

    def __init__(self, fp32_onnx: Path, data: StoredData, threads: int, batch_size: int, num_workers: int = 0):
        """Raises: ValueError: the validation split is empty; DataChanged: an image changed since the data stage."""
        self.task, self.labels = data.task, data.references("validation")
        if len(self.labels) == 0:
            raise ValueError("the validation split is empty; set data.validation_fraction")
        self.data, self.threads, self.batch_size, self.num_workers = data, threads, batch_size, num_workers
        self.fp32_logits = np.concatenate([logits for logits, _ in self._batch_logits(fp32_onnx)])
        self.fp32_predicted = self.task.predict(self.fp32_logits)
        self.fp32_scores = self.task.scores(self.labels, self.fp32_predicted)
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
        """Accuracy of both models (top-1, or line accuracy and CER), their agreement, and how far INT8's
        outputs are from FP32's (`logit_error`, over every output value, whatever the shape)."""
        correct = agreeing = 0
        squared_error = 0.0
        predicted = []
        for logits, rows in self._batch_logits(int8_onnx):
            batch = self.task.predict(logits)
            predicted.append(batch)
            correct += int(np.sum(batch == self.labels[rows]))
            agreeing += int(np.sum(batch == self.fp32_predicted[rows]))
            squared_error += float(np.sum((logits - self.fp32_logits[rows]) ** 2, dtype=np.float64))
        count = len(self.labels)
        int8_top1 = 100 * correct / count
        scores = {
            TASK: self.task.name,
            "validation_samples": int(count),
            "fp32_top1_pct": self.fp32_top1_pct,
            "int8_top1_pct": int8_top1,
            "accuracy_drop_pts": self.fp32_top1_pct - int8_top1,
            "agreement": agreeing / count,
            # relative logit error: ranks candidates that tie on accuracy (small splits often do)
            "logit_error": squared_error / self.fp32_logits.size / (self._fp32_logit_variance + 1e-12),
        }
        if "cer_pct" in self.fp32_scores:
            int8_cer = self.task.scores(self.labels, np.concatenate(predicted))["cer_pct"]
            scores.update({"fp32_cer_pct": self.fp32_scores["cer_pct"], "int8_cer_pct": int8_cer,
                           "cer_increase_pts": int8_cer - self.fp32_scores["cer_pct"]})
        return scores


def policy_failures(policy: GatePolicy, metrics: dict) -> list[str]:
    """The validation criteria `metrics` misses under `policy`, described as the gate would."""
    decision = decide(policy, metrics)
    return [criterion.describe() for criterion in decision.criteria
            if criterion.name in VALIDATION_CRITERIA and not criterion.passed]
