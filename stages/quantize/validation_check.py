"""The gate's accuracy rules, applied on the validation split: how the INT8 search judges a candidate
without looking at the test split the gate will read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.policy.decision import decide
from quantgate.runtimes.latency import session
from quantgate.samples.reading import StoredData
from quantgate.stages.evaluate.outputs import TASK

# The gate's criteria that a validation split can answer; the rest (bootstrap interval on the test
# split, regression against the release, staleness) belong to the gate alone. cer_increase_pts is
# judged for text recognition only (the gate has no such criterion for classification).
VALIDATION_CRITERIA = ("accuracy_drop_pts", "cer_increase_pts", "hmean_drop_pts", "agreement", "int8_top1_pct",
                       "speedup")


class ValidationCheck:
    """FP32 outputs on the validation split, computed once; `score` compares an INT8 model with them.

    The images are streamed batch by batch for every model scored (image folders are decoded again each
    time); only per-image bookkeeping (references, FP32 outputs and predictions) is kept. Outputs are
    decoded by the data's task (argmax, greedy CTC for text, boxes for pages), as the evaluate stage decodes
    them. A task that keeps no outputs (a detector's maps) has its FP32 outputs computed again beside each
    INT8 batch instead of held.
    """

    def __init__(self, fp32_onnx: Path, data: StoredData, threads: int, batch_size: int, num_workers: int = 0):
        """Raises: ValueError: the validation split is empty; DataChanged: an image changed since the data stage."""
        self.task, self.labels = data.task, data.references("validation")
        if len(self.labels) == 0:
            raise ValueError("the validation split is empty; set data.validation_fraction")
        self.data, self.threads, self.batch_size, self.num_workers = data, threads, batch_size, num_workers
        self.fp32_onnx = fp32_onnx
        fp32_logits, fp32_predicted, squares, count = [], [], 0.0, 0
        for logits, labels, _ in self._batch_logits(fp32_onnx):
            fp32_predicted.append(self.task.predict(logits, labels))
            if self.task.keeps_outputs:
                fp32_logits.append(logits)
            else:  # nothing is held: the variance comes from running sums around each batch's mean
                squares += float(np.sum(np.square(logits - logits.mean()), dtype=np.float64))
                count += logits.size
        self.fp32_logits = np.concatenate(fp32_logits) if fp32_logits else None
        self.fp32_predicted = np.concatenate(fp32_predicted)
        self.fp32_scores = self.task.scores(self.labels, self.fp32_predicted)
        self.fp32_top1_pct = self.fp32_scores["top1_pct"]
        # Held outputs: their variance, as before
        self._fp32_logit_variance = float(np.var(self.fp32_logits)) if self.fp32_logits is not None else \
            squares / max(count, 1)

    def _batch_logits(self, onnx_file: Path):
        """(logits, batch labels, row slice) of each validation batch, in order."""
        model = session(onnx_file, self.threads)
        name, start = model.get_inputs()[0].name, 0
        for images, labels in self.data.batches("validation", self.batch_size, self.num_workers):
            yield model.run(None, {name: images})[0], labels, slice(start, start + len(images))
            start += len(images)

    def _fp32_batches(self):
        """The FP32 outputs of each validation batch: held, or computed again (see the class docstring)."""
        if self.fp32_logits is not None:
            while True:
                yield None
        yield from (logits for logits, _, _ in self._batch_logits(self.fp32_onnx))

    def score(self, int8_onnx: Path) -> dict:
        """Accuracy of both models (top-1, line accuracy and CER, or hmean), their agreement, and how far INT8's
        outputs are from FP32's (`logit_error`, over every output value, whatever the shape)."""
        squared_error, size = 0.0, 0
        predicted = []
        for (logits, labels, rows), fp32 in zip(self._batch_logits(int8_onnx), self._fp32_batches()):
            predicted.append(self.task.predict(logits, labels))
            reference = self.fp32_logits[rows] if fp32 is None else fp32
            squared_error += float(np.sum((logits - reference) ** 2, dtype=np.float64))
            size += logits.size
        int8_predicted = np.concatenate(predicted)
        compared = self.task.compare(self.labels, self.fp32_predicted, int8_predicted)
        scores = {
            TASK: self.task.name,
            "validation_samples": int(len(self.labels)),
            "fp32_top1_pct": self.fp32_top1_pct,
            "int8_top1_pct": compared["int8_top1_pct"],
            "accuracy_drop_pts": self.fp32_top1_pct - compared["int8_top1_pct"],
            "agreement": compared["agreement"],
            # relative logit error: ranks candidates that tie on accuracy (small splits often do)
            "logit_error": squared_error / max(size, 1) / (self._fp32_logit_variance + 1e-12),
        }
        for key in ("fp32_cer_pct", "int8_cer_pct", "cer_increase_pts", "fp32_hmean_pct", "int8_hmean_pct",
                    "hmean_drop_pts"):
            if key in compared:
                scores[key] = compared[key]
        return scores


def policy_failures(policy: GatePolicy, metrics: dict) -> list[str]:
    """The validation criteria `metrics` misses under `policy`, described as the gate would."""
    decision = decide(policy, metrics)
    return [criterion.describe() for criterion in decision.criteria
            if criterion.name in VALIDATION_CRITERIA and not criterion.passed]


def samples_to_show(policy: GatePolicy, samples: int, runtime: str = "onnxruntime") -> dict:
    """How many validation samples the policy's rate criteria need, against the `samples` there are.

    Agreement by the rule of three: with no disagreement in n samples, the disagreement rate is below
    3/n at 95 % confidence, so showing `min_agreement` takes n >= 3 / (1 - min_agreement) (300 for
    0.99). An accuracy drop moves in steps of one sample, 100/n points: a step larger than
    `max_accuracy_drop` cannot show a drop within it. `short` names the criteria `samples` falls short of.
    """
    agreement = policy.threshold("min_agreement", runtime)
    drop = policy.threshold("max_accuracy_drop", runtime)
    needed = {"min_agreement": int(np.ceil(3 / (1 - agreement) - 1e-9)) if 0 < agreement < 1 else 0,
              "max_accuracy_drop": int(np.ceil(100 / drop - 1e-9)) if 0 < drop < 100 else 0}
    return {"samples": samples, "needed": needed, "short": sorted(name for name, n in needed.items() if samples < n)}
