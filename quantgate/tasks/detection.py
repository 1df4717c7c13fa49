"""Text detection with a DB detector (PaddleOCR's PP-OCR det): probability maps to boxes, scored by hmean.

A page's reference is its PaddleOCR label, a JSON list of {"transcription", "points"}; a prediction is a JSON
list of {"points": [[x, y] x 4] (whole page pixels), "score"}. Both travel as numpy unicode arrays, one JSON
string per page, so they save and load with allow_pickle=False like the other tasks' predictions. The model's
labels for `predict` are each page's geometry `[h, w, resized_h, resized_w]` from `page_input`, which maps the
canvas-sized map back to page pixels. The same post-processing runs on FP32 and INT8 maps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from quantgate.tasks.db_postprocess import DBParams, boxes_from_map
from quantgate.tasks.det_metrics import box_agreement, detection_scores, match_page, page_hmean

SCORE_DECIMALS = 4


def boxes(prediction_json: str) -> list[np.ndarray]:
    """A page's predicted boxes, each [4, 2] float32 page pixels, from its prediction JSON."""
    return [np.asarray(item["points"], np.float32).reshape(-1, 2) for item in json.loads(str(prediction_json))]


def ground_truth(reference_json: str) -> list[dict]:
    """A page's labelled regions from its PaddleOCR label JSON: [{"points": [K, 2] float64, "transcription",
    "ignore"}], "ignore" kept when the label gives it (the metrics also ignore "###" and "*").

    Raises:
        ValueError: the label is not a JSON list of objects with "points".
    """
    regions = json.loads(str(reference_json))
    if not isinstance(regions, list) or not all(isinstance(r, dict) and "points" in r for r in regions):
        raise ValueError(f"a detection label must be a JSON list of {{\"transcription\", \"points\"}} objects, "
                         f"not {str(reference_json)[:120]!r}")
    return [{"points": np.asarray(r["points"], np.float64).reshape(-1, 2),
             "transcription": str(r.get("transcription", "")), "ignore": bool(r.get("ignore", False))}
            for r in regions]


def _as_strings(pages: list[str]) -> np.ndarray:
    return np.asarray(pages, dtype=str) if pages else np.zeros(0, dtype="<U1")


@dataclass(frozen=True)
class TextDetection:
    params: DBParams = DBParams()
    iou_threshold: float = 0.5  # a box matches a region when IoU is above it (strictly, as PaddleOCR)
    name: str = "text_detection"
    accuracy_name: str = "hmean"
    keeps_outputs: bool = False  # a probability map per page is megabytes (1.6 MB at 640x640): keep the boxes
    stores_outputs: bool = False

    def predict(self, outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        """Each page's boxes as a JSON string, from the maps [N, 1, H, W] and the pages' geometry [N, 4].

        Raises:
            ValueError: no geometry, or maps and geometry that do not fit each other.
        """
        if labels is None:
            raise ValueError("text detection needs each page's geometry [h, w, resized_h, resized_w] to map "
                             "boxes to the page: pass the data stage's labels to predict")
        maps, geometry = np.asarray(outputs), np.asarray(labels)
        if maps.ndim != 4 or maps.shape[1] != 1:
            raise ValueError(f"a DB detector's output is a probability map [N, 1, H, W], not shape {maps.shape}")
        if geometry.shape != (len(maps), 4):
            raise ValueError(f"{len(maps)} maps need geometry of shape ({len(maps)}, 4), not {geometry.shape}")
        pages = []
        for prob, page in zip(maps[:, 0], geometry):
            found = boxes_from_map(prob, page, self.params)
            pages.append(json.dumps([{"points": corners.astype(int).tolist(), "score": round(score, SCORE_DECIMALS)}
                                     for corners, score in found], sort_keys=True))
        return _as_strings(pages)

    def scores(self, references: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
        """Precision, recall and hmean over all pages ("top1_pct" is the hmean); NaN for no pages at all."""
        if not len(references):
            return dict.fromkeys(("top1_pct", "precision_pct", "recall_pct", "hmean_pct"), float("nan"))
        measured = detection_scores([ground_truth(r) for r in references], [boxes(p) for p in predicted],
                                    self.iou_threshold)
        return {"top1_pct": measured["hmean_pct"], "precision_pct": measured["precision_pct"],
                "recall_pct": measured["recall_pct"], "hmean_pct": measured["hmean_pct"]}

    def per_sample(self, references: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """Each page's own hmean in [0, 1], float64 (a page without countable regions scores 1 when nothing is
        found on it, else 0: PaddleOCR's per-image convention, see det_metrics.page_hmean)."""
        return np.asarray([page_hmean(match_page(ground_truth(r), boxes(p), self.iou_threshold))
                           for r, p in zip(references, predicted, strict=True)], np.float64)

    def compare(self, references: np.ndarray, fp32: np.ndarray, int8: np.ndarray) -> dict:
        """Both models against the labels, and INT8's boxes against FP32's ("agreement", see box_agreement)."""
        fp32_scores, int8_scores = self.scores(references, fp32), self.scores(references, int8)
        fp32_boxes, int8_boxes = [boxes(p) for p in fp32], [boxes(p) for p in int8]
        return {
            "fp32_top1_pct": fp32_scores["top1_pct"],
            "int8_top1_pct": int8_scores["top1_pct"],
            "accuracy_delta_pts": int8_scores["hmean_pct"] - fp32_scores["hmean_pct"],
            "agreement": box_agreement(fp32_boxes, int8_boxes, self.iou_threshold) if len(fp32) else float("nan"),
            "fp32_precision_pct": fp32_scores["precision_pct"],
            "int8_precision_pct": int8_scores["precision_pct"],
            "fp32_recall_pct": fp32_scores["recall_pct"],
            "int8_recall_pct": int8_scores["recall_pct"],
            "fp32_hmean_pct": fp32_scores["hmean_pct"],
            "int8_hmean_pct": int8_scores["hmean_pct"],
            "hmean_drop_pts": fp32_scores["hmean_pct"] - int8_scores["hmean_pct"],
            "fp32_boxes": sum(len(page) for page in fp32_boxes),
            "int8_boxes": sum(len(page) for page in int8_boxes),
        }
