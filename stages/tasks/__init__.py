"""What a task supplies to the stages after `data`: how a model's outputs become predictions, and how
predictions are scored.

Two tasks, chosen by the top-level `task` key and recorded in the data stage's `dataset.json`:
classification (one class per image, top-1) and text_recognition (a text line per image, CTC). Each
is a small class with the same methods (`Task`); the stages call it instead of assuming argmax and
top-1. Nothing here imports Paddle: evaluation, the search and the bundle use it with numpy alone.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from quantgate.stages.tasks.classification import Classification
from quantgate.stages.tasks.text import TextRecognition

CLASSIFICATION, TEXT_RECOGNITION = "classification", "text_recognition"
TASK_NAMES = (CLASSIFICATION, TEXT_RECOGNITION)


class Task(Protocol):
    name: str
    accuracy_name: str  # what the *_top1_pct metrics measure, in words ("top-1", "line accuracy")

    def predict(self, outputs: np.ndarray) -> np.ndarray:
        """The model's outputs for a batch as predictions: class indices, or decoded strings."""
        ...

    def scores(self, references: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
        """The task's numbers for one model against the references (always "top1_pct")."""
        ...

    def compare(self, references: np.ndarray, fp32: np.ndarray, int8: np.ndarray) -> dict:
        """Both models' numbers, INT8 against FP32, with the metric keys the gate and the report read."""
        ...


def task_of(spec: dict) -> Task:
    """The task of a data stage's record (`dataset.json`); records written before tasks are classification."""
    name = spec.get("task", CLASSIFICATION)
    if name == TEXT_RECOGNITION:
        return TextRecognition(tuple(spec["characters"]))
    if name == CLASSIFICATION:
        return Classification(tuple(spec.get("classes", ())))
    raise ValueError(f"unknown task {name!r} in the data record; known tasks: {', '.join(TASK_NAMES)}")
