"""Image classification: one class per image, the argmax of the logits, scored by top-1."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def per_class_top1(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> list[float]:
    """Top-1 within each class, in percent (NaN for a class with no sample)."""
    return [float(100.0 * np.mean(predicted[labels == k] == k)) if np.any(labels == k) else float("nan")
            for k in range(num_classes)]


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts of (true class, predicted class), rows true, columns predicted."""
    counts = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(counts, (np.asarray(labels, np.int64), np.asarray(predicted, np.int64)), 1)
    return counts


@dataclass(frozen=True)
class Classification:
    classes: tuple[str, ...]
    name: str = "classification"
    accuracy_name: str = "top-1"

    keeps_outputs: bool = True
    stores_outputs: bool = True  # a row of class scores per sample: the stored predictions keep them

    def predict(self, outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        return np.asarray(outputs).argmax(axis=-1)

    def scores(self, references: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
        return {"top1_pct": float(100.0 * np.mean(predicted == references)) if len(references) else float("nan")}

    def per_sample(self, references: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        return (np.asarray(predicted) == np.asarray(references)).astype(np.float64)

    def compare(self, references: np.ndarray, fp32: np.ndarray, int8: np.ndarray) -> dict:
        fp32_top1, int8_top1 = self.scores(references, fp32)["top1_pct"], self.scores(references, int8)["top1_pct"]
        count = len(self.classes) or int(max(references.max(initial=-1), fp32.max(initial=-1),
                                             int8.max(initial=-1)) + 1)
        return {
            "fp32_top1_pct": fp32_top1,
            "int8_top1_pct": int8_top1,
            "accuracy_delta_pts": int8_top1 - fp32_top1,
            "agreement": float(np.mean(fp32 == int8)) if len(fp32) else float("nan"),
            "per_class_top1_pct_fp32": per_class_top1(references, fp32, count),
            "per_class_top1_pct_int8": per_class_top1(references, int8, count),
        }
