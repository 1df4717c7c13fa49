"""Text detection metrics: precision, recall and hmean of boxes against labelled regions at IoU 0.5.

The rules are PaddleOCR's DetMetric (DetectionIoUEvaluator, from the ICDAR 2015 protocol), so a number here is
the number PaddleOCR's eval reports for the same boxes:

- a region whose transcription is "###" or "*" (PaddleOCR's DetLabelEncode), or that has "ignore": True, is
  ignored: it is neither counted nor matched, and a detection that lies more than half (by its own area) inside
  any one ignored region is dropped from the counts too;
- polygons that are not valid and simple (self-intersecting, fewer than 3 distinct points) are left out
  entirely, on both sides;
- matching is one-to-one and greedy in label order, then detection order: the first unmatched pair with
  IoU strictly greater than the threshold (> 0.5, not >=) is matched. It is not a best-IoU assignment.
- over a set of pages, matches and counted boxes are summed first: precision = matched / detections counted,
  recall = matched / regions counted, each 0 when its denominator is 0 (PaddleOCR's combine_results), and
  hmean their harmonic mean (0 when both are 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from shapely.geometry import Polygon

IGNORED_TRANSCRIPTIONS = ("###", "*")
IGNORED_AREA_FRACTION = 0.5  # a detection more than this fraction inside an ignored region does not count


def _polygon(points) -> Polygon | None:
    """A shapely polygon of `points`, or None when it is not one PaddleOCR would evaluate (invalid, not simple)."""
    corners = np.asarray(points, np.float64).reshape(-1, 2)
    if len(corners) < 3:
        return None
    shape = Polygon(corners)
    return shape if shape.is_valid and shape.is_simple else None


def polygon_iou(a, b) -> float:
    """Intersection over union of two polygons given as [[x, y], ...]; 0 when either is invalid or has no area."""
    first, second = _polygon(a), _polygon(b)
    if first is None or second is None:
        return 0.0
    union = first.union(second).area
    return float(first.intersection(second).area / union) if union > 0 else 0.0


def is_ignored(region: dict) -> bool:
    """Whether a labelled region is a don't-care region ("###" or "*" transcription, or "ignore": True)."""
    return bool(region.get("ignore", False)) or region.get("transcription") in IGNORED_TRANSCRIPTIONS


@dataclass(frozen=True)
class PageMatch:
    """One page's counts and the matched (label index, detection index, IoU), indices into the inputs."""

    gt_care: int  # labelled regions that count: valid and not ignored
    det_care: int  # detections that count: valid and not mostly inside an ignored region
    matched: int
    pairs: tuple[tuple[int, int, float], ...]


def match_page(gt: Sequence[dict], det: Sequence[np.ndarray], iou_threshold: float = 0.5) -> PageMatch:
    """Match one page's detections [[x, y] x 4+] to its labelled regions ({"points", "transcription"}).

    The rules are the module's (PaddleOCR's): ignored regions and the detections inside them do not count,
    invalid polygons are left out, and pairs are matched greedily, one-to-one, for IoU > `iou_threshold`.
    """
    regions = [(index, shape, is_ignored(region)) for index, region in enumerate(gt)
               if (shape := _polygon(region["points"])) is not None]
    detections = [(index, shape) for index, points in enumerate(det) if (shape := _polygon(points)) is not None]
    ignored = [shape for _, shape, ignore in regions if ignore]
    cared_regions = [(index, shape) for index, shape, ignore in regions if not ignore]
    cared_detections = [(index, shape) for index, shape in detections
                        if not any(shape.area > 0 and shape.intersection(region).area / shape.area
                                   > IGNORED_AREA_FRACTION for region in ignored)]
    pairs, used = [], set()
    for gt_index, region in cared_regions:
        for det_index, detection in cared_detections:
            if det_index in used:
                continue
            union = region.union(detection).area
            iou = region.intersection(detection).area / union if union > 0 else 0.0
            if iou > iou_threshold:
                pairs.append((gt_index, det_index, float(iou)))
                used.add(det_index)
                break
    return PageMatch(gt_care=len(cared_regions), det_care=len(cared_detections), matched=len(pairs),
                     pairs=tuple(pairs))


def page_hmean(page: PageMatch) -> float:
    """One page's hmean in [0, 1], with PaddleOCR's per-image convention for empty pages: a page with no region
    to find scores 1 when nothing is found on it and 0 when something is; regions with nothing found score 0.

    Over a set of pages the mean of these is not `detection_scores`' hmean (that sums counts first); it is what
    resamples page by page.
    """
    if page.gt_care == 0:
        return 0.0 if page.det_care else 1.0
    recall, precision = page.matched / page.gt_care, _ratio(page.matched, page.det_care)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def detection_scores(gts_per_page: Sequence[Sequence[dict]], dets_per_page: Sequence[Sequence[np.ndarray]],
                     iou_threshold: float = 0.5) -> dict:
    """Precision, recall and hmean in percent over all pages, from summed counts (PaddleOCR's combine_results).

    With nothing to find (no counted region) recall is 0, and with nothing found precision is 0, so hmean is 0
    then as well: PaddleOCR's convention, which makes an empty test set score 0, never a perfect 100.
    Also returns the summed counts: gt_boxes and det_boxes (those that count) and matched.

    Raises:
        ValueError: the two lists do not have one entry per page each.
    """
    if len(gts_per_page) != len(dets_per_page):
        raise ValueError(f"{len(gts_per_page)} pages of labels but {len(dets_per_page)} pages of detections")
    pages = [match_page(gt, det, iou_threshold) for gt, det in zip(gts_per_page, dets_per_page)]
    gt_care, det_care = sum(page.gt_care for page in pages), sum(page.det_care for page in pages)
    matched = sum(page.matched for page in pages)
    precision, recall = _ratio(matched, det_care), _ratio(matched, gt_care)
    hmean = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision_pct": 100.0 * precision, "recall_pct": 100.0 * recall, "hmean_pct": 100.0 * hmean,
            "gt_boxes": gt_care, "det_boxes": det_care, "matched": matched}


def box_agreement(fp32_pages: Sequence[Sequence[np.ndarray]], int8_pages: Sequence[Sequence[np.ndarray]],
                  iou_threshold: float = 0.5) -> float:
    """How well INT8's boxes reproduce FP32's, in [0, 1]: the hmean of INT8's boxes scored with FP32's as labels.

    Symmetric in what it punishes: an FP32 box INT8 misses lowers recall, an extra INT8 box lowers precision.
    1.0 when neither model finds any box on any page (they agree), 0.0 when only one of them finds boxes.

    Raises:
        ValueError: the two lists do not have one entry per page each.
    """
    if len(fp32_pages) != len(int8_pages):
        raise ValueError(f"{len(fp32_pages)} pages of FP32 boxes but {len(int8_pages)} pages of INT8 boxes")
    if not any(len(page) for page in fp32_pages) and not any(len(page) for page in int8_pages):
        return 1.0
    as_labels = [[{"points": box, "transcription": ""} for box in page] for page in fp32_pages]
    return detection_scores(as_labels, int8_pages, iou_threshold)["hmean_pct"] / 100.0
