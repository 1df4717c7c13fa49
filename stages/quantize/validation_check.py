"""The gate's accuracy rules, applied on the validation split: how the INT8 search judges a candidate
without looking at the test split the gate will read.

A `ValidationCheck` scores in one runtime (onnxruntime unless told otherwise), against that runtime's own FP32
outputs, as the gate compares INT8 and FP32 in the same runtime; `runtime_checks` holds one per runtime the gate
judges.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.special import log_softmax
from scipy.stats import binomtest, norm

from quantgate.config import GatePolicy
from quantgate.policy.decision import decide
from quantgate.runtimes.forms import ModelForm, open_runner
from quantgate.samples.reading import StoredData
from quantgate.stages.evaluate.outputs import ONNXRUNTIME, TASK
from quantgate.stages.quantize.evidence import KL_DISTANCE
from quantgate.tasks import CLASSIFICATION, TEXT_RECOGNITION

# The gate's criteria that a validation split can answer; the rest (bootstrap interval on the test
# split, regression against the release, staleness) belong to the gate alone. cer_increase_pts is
# judged for text recognition only (the gate has no such criterion for classification).
VALIDATION_CRITERIA = ("accuracy_drop_pts", "cer_increase_pts", "hmean_drop_pts", "agreement", "int8_top1_pct",
                       "speedup")
# Tasks whose accuracy is the share of samples read right (a binomial proportion: it has a Wilson interval); a
# detector's hmean is summed over pages, and gets none.
PROPORTION_TASKS = (CLASSIFICATION, TEXT_RECOGNITION)
# Tasks whose output is a distribution over classes per frame (CTC): their distance to FP32 is a KL divergence.
DISTRIBUTION_TASKS = (TEXT_RECOGNITION,)
PROBABILITY_FLOOR = 1e-7  # log() of a probability that INT8 or FP32 put at 0
Z95 = float(norm.ppf(0.975))


def onnx_form(model: Path | ModelForm, int8: bool) -> ModelForm:
    """`model` as a runtime loads it: an ONNX file given as a path becomes a form of the quantize stage's."""
    return model if isinstance(model, ModelForm) else ModelForm(Path(model), int8, Path(model).name, "quantize")


class ValidationCheck:
    """FP32 outputs on the validation split in one runtime, computed once; `score` compares an INT8 model with them.

    The images are streamed batch by batch for every model scored (image folders are decoded again each
    time); only per-image bookkeeping (references, FP32 outputs and predictions) is kept. Outputs are
    decoded by the data's task (argmax, greedy CTC for text, boxes for pages), as the evaluate stage decodes
    them. A task that keeps no outputs (a detector's maps) has its FP32 outputs computed again beside each
    INT8 batch instead of held.
    """

    def __init__(self, fp32_onnx: Path | ModelForm, data: StoredData, threads: int, batch_size: int,
                 num_workers: int = 0, runtime: str = ONNXRUNTIME):
        """`fp32_onnx`: the FP32 model as `runtime` runs it (an ONNX file, or a form: a Paddle program's folder for
        paddle_inference).

        Raises: ValueError: the validation split is empty; DataChanged: an image changed since the data stage;
        RuntimeCannotRun: `runtime` cannot run the FP32 model.
        """
        self.task, self.labels = data.task, data.references("validation")
        if len(self.labels) == 0:
            raise ValueError("the validation split is empty; set data.validation_fraction")
        self.data, self.threads, self.batch_size, self.num_workers = data, threads, batch_size, num_workers
        self.runtime, self.fp32_form = runtime, onnx_form(fp32_onnx, False)
        self.fp32_onnx = self.fp32_form.path
        fp32_logits, fp32_predicted, squares, count = [], [], 0.0, 0
        for logits, labels, _ in self._batch_logits(self.fp32_form):
            fp32_predicted.append(self.task.predict(logits, labels))
            if self.task.keeps_outputs:
                fp32_logits.append(logits)
            else:  # nothing is held: the variance comes from running sums around each batch's mean
                squares += float(np.sum(np.square(logits - logits.mean()), dtype=np.float64))
                count += logits.size
        self.fp32_logits = np.concatenate(fp32_logits) if fp32_logits else None
        # DISTRIBUTION_TASKS: whether the held outputs are distributions already (None: no KL for this task)
        self._outputs_are_probabilities = _are_probabilities(self.fp32_logits) \
            if self.task.name in DISTRIBUTION_TASKS and self.fp32_logits is not None else None
        self.fp32_predicted = np.concatenate(fp32_predicted)
        self.fp32_scores = self.task.scores(self.labels, self.fp32_predicted)
        self.fp32_top1_pct = self.fp32_scores["top1_pct"]
        self.fp32_outcomes = _read_right(self.task.per_sample(self.labels, self.fp32_predicted))
        # Held outputs: their variance, as before
        self._fp32_logit_variance = float(np.var(self.fp32_logits)) if self.fp32_logits is not None else \
            squares / max(count, 1)

    def _batch_logits(self, form: ModelForm):
        """(logits, batch labels, row slice) of each validation batch, in order, run in this check's runtime (which
        compiles OpenVINO for the batch shape and pads the last, shorter batch)."""
        runner = open_runner(self.runtime, form, self.threads, (self.batch_size, *self.data.input_shape))
        start = 0
        for images, labels in self.data.batches("validation", self.batch_size, self.num_workers):
            yield np.asarray(runner(images)), labels, slice(start, start + len(images))
            start += len(images)

    def _fp32_batches(self):
        """The FP32 outputs of each validation batch: held, or computed again (see the class docstring)."""
        if self.fp32_logits is not None:
            while True:
                yield None
        yield from (logits for logits, _, _ in self._batch_logits(self.fp32_form))

    def _log_probabilities(self, outputs: np.ndarray) -> np.ndarray:
        """Per-frame log-distributions of `outputs`: PP-OCRv4's recognizer ends in softmax, a logit model does not."""
        outputs = np.asarray(outputs, np.float32)
        if self._outputs_are_probabilities:
            return np.log(np.maximum(outputs, PROBABILITY_FLOOR))
        return log_softmax(outputs, axis=-1)

    def score(self, int8_onnx: Path | ModelForm) -> dict:
        """`score_samples`' numbers alone (a fall-back estimate keeps no per-sample outcomes)."""
        return self.score_samples(int8_onnx)[0]

    def score_samples(self, int8_onnx: Path | ModelForm) -> tuple[dict, np.ndarray]:
        """Accuracy of both models (top-1, line accuracy and CER, or hmean), their agreement, and how far INT8's
        outputs are from FP32's (`logit_error`, over every output value, whatever the shape; for text recognition
        also `output_kl`, the mean per-frame KL divergence of INT8's distribution from FP32's); and per validation
        sample whether INT8 read it right (top-1 correct, the line exactly right, the page's hmean 1: every
        labelled box matched and nothing else found), which the search's McNemar test pairs between trials (of
        several runtimes', the binding one's: `runtime_checks`, `evidence`).
        For classification and text, the 95 % intervals of INT8's accuracy (Wilson) and of the drop (paired,
        Agresti-Min) too."""
        squared_error, size, divergence, frames = 0.0, 0, 0.0, 0
        predicted = []
        for (logits, labels, rows), fp32 in zip(self._batch_logits(onnx_form(int8_onnx, True)), self._fp32_batches()):
            predicted.append(self.task.predict(logits, labels))
            reference = self.fp32_logits[rows] if fp32 is None else fp32
            squared_error += float(np.sum((logits - reference) ** 2, dtype=np.float64))
            size += logits.size
            if self._outputs_are_probabilities is not None:  # computed per batch: the held outputs stay float32
                fp32_log = self._log_probabilities(reference)
                per_frame = np.sum(np.exp(fp32_log) * (fp32_log - self._log_probabilities(logits)), axis=-1)
                divergence, frames = divergence + float(np.sum(per_frame, dtype=np.float64)), frames + per_frame.size
        int8_predicted = np.concatenate(predicted)
        outcomes = _read_right(self.task.per_sample(self.labels, int8_predicted))
        compared = self.task.compare(self.labels, self.fp32_predicted, int8_predicted)
        scores = {
            TASK: self.task.name,
            "validation_samples": len(self.labels),
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
        if self._outputs_are_probabilities is not None:
            scores[KL_DISTANCE] = divergence / max(frames, 1)
        if self.task.name in PROPORTION_TASKS:
            scores["int8_top1_ci95_pct"] = proportion_ci95_pct(int(outcomes.sum()), len(outcomes))
            scores["accuracy_drop_ci95_pts"] = paired_drop_ci95_pts(self.fp32_outcomes, outcomes)
        return scores, outcomes


def _read_right(per_sample: np.ndarray) -> np.ndarray:
    """Per sample, right or wrong: a score of 1 (a page's hmean: every region matched, nothing else found)."""
    return np.asarray(per_sample, np.float64) >= 1.0 - 1e-9


def _are_probabilities(outputs: np.ndarray) -> bool:
    """Whether `outputs` are distributions along the last axis already (a model ending in softmax)."""
    return bool(outputs.size and outputs.min() >= 0 and outputs.max() <= 1
                and np.allclose(outputs.sum(axis=-1, dtype=np.float64), 1.0, atol=1e-3))


def proportion_ci95_pct(right: int, samples: int) -> list[float]:
    """The 95 % Wilson interval of `right` of `samples`, in percent."""
    interval = binomtest(right, samples).proportion_ci(0.95, method="wilson")
    return [100.0 * interval.low, 100.0 * interval.high]


def paired_drop_ci95_pts(fp32: np.ndarray, int8: np.ndarray) -> list[float]:
    """The 95 % interval of FP32's accuracy minus INT8's on the same samples, in points: Agresti and Min's (2005)
    Wald interval for matched proportions with half a sample added to each cell, which keeps a width where no
    sample changed (a plain Wald interval is then [0, 0])."""
    n = len(fp32) + 2.0
    lost, gained = np.sum(fp32 & ~int8) + 0.5, np.sum(int8 & ~fp32) + 0.5
    drop = (lost - gained) / n
    half = Z95 * np.sqrt(max(lost + gained - (lost - gained) ** 2 / n, 0.0)) / n
    return [float(100.0 * (drop - half)), float(100.0 * (drop + half))]


def policy_failures(policy: GatePolicy, metrics: dict, runtime: str | None = None) -> list[str]:
    """The validation criteria `metrics` misses under `policy`, described as the gate would.

    `runtime`: judge `metrics` as that runtime's, against its thresholds (a policy field may be a map by runtime),
    each failure named for it ("openvino: accuracy_drop_pts = 2.16 pts (must be <= 1) FAILED"); None: as the
    gate judges its primary runtime, unnamed.
    """
    decision = decide(policy, metrics, runtimes=() if runtime is None else (runtime,))
    prefix = "" if runtime is None else f"{runtime}: "
    return [prefix + criterion.describe() for criterion in decision.criteria
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
