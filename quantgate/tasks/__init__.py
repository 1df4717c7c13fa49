"""What a task supplies to the stages after `data`: how a model's outputs become predictions, and how
predictions are scored.

Three tasks, chosen by the top-level `task` key and recorded in the data stage's `dataset.json`:
classification (one class per image, top-1), text_recognition (a text line per image, CTC) and
text_detection (text boxes per page, DB post-processing, hmean). Each is a small class with the same
methods (`Task`); the stages call it instead of assuming argmax and top-1. Nothing here imports Paddle:
evaluation, the search and the bundle use it with numpy (and OpenCV for boxes) alone.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from quantgate.tasks.classification import Classification
from quantgate.tasks.text import TextRecognition

CLASSIFICATION, TEXT_RECOGNITION, TEXT_DETECTION = "classification", "text_recognition", "text_detection"
TASK_NAMES = (CLASSIFICATION, TEXT_RECOGNITION, TEXT_DETECTION)


class Task(Protocol):
    name: str
    accuracy_name: str  # what the *_top1_pct metrics measure, in words ("top-1", "line accuracy", "hmean")
    # Whether a split's raw outputs are small enough to keep beside the predictions (a detector's
    # probability maps are megabytes per page: only its boxes are kept).
    keeps_outputs: bool
    # Whether the stored predictions keep them too; the evaluate stage otherwise compares a batch's outputs
    # (max_abs_logit_diff) and drops them.
    stores_outputs: bool

    def predict(self, outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        """The model's outputs for a batch as predictions: class indices, decoded strings, or boxes (JSON per
        page, mapped back to the page through the batch's labels: each page's geometry)."""
        ...

    def scores(self, references: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
        """The task's numbers for one model against the references (always "top1_pct")."""
        ...

    def compare(self, references: np.ndarray, fp32: np.ndarray, int8: np.ndarray) -> dict:
        """Both models' numbers, INT8 against FP32, with the metric keys the gate and the report read."""
        ...

    def per_sample(self, references: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """Each sample's score in [0, 1] (right or wrong; a page's hmean): what a paired bootstrap resamples."""
        ...


def scorer(name: str) -> Task:
    """A task `name` that scores stored predictions (it decodes nothing: no dictionary or post-processing needed).

    Raises:
        ValueError: an unknown task name.
    """
    return task_of({"task": name, "characters": (), "postprocess": {}})


def task_of(spec: dict) -> Task:
    """The task of a data stage's record (`dataset.json`); records written before tasks are classification."""
    name = spec.get("task", CLASSIFICATION)
    if name == TEXT_DETECTION:
        from quantgate.tasks.db_postprocess import DBParams
        from quantgate.tasks.detection import TextDetection

        return TextDetection(DBParams(**spec["postprocess"]))
    if name == TEXT_RECOGNITION:
        return TextRecognition(tuple(spec["characters"]))
    if name == CLASSIFICATION:
        return Classification(tuple(spec.get("classes", ())))
    raise ValueError(f"unknown task {name!r} in the data record; known tasks: {', '.join(TASK_NAMES)}")
