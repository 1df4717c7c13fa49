"""Detection metrics on hand-made boxes whose precision, recall and hmean are known (PaddleOCR's DetMetric rules)."""

from __future__ import annotations

import numpy as np
import pytest

from quantgate.tasks.det_metrics import box_agreement, detection_scores, match_page, page_hmean, polygon_iou


def rect(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.asarray([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)


def region(x0: float, y0: float, x1: float, y1: float, text: str = "金额", **extra) -> dict:
    return {"points": rect(x0, y0, x1, y1).tolist(), "transcription": text, **extra}


def test_polygon_iou_of_overlapping_disjoint_and_invalid_polygons():
    assert polygon_iou(rect(0, 0, 10, 10), rect(0, 0, 10, 10)) == pytest.approx(1.0)
    assert polygon_iou(rect(0, 0, 10, 10), rect(5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert polygon_iou(rect(0, 0, 10, 10), rect(20, 20, 30, 30)) == 0.0
    bowtie = [[0, 0], [10, 10], [10, 0], [0, 10]]  # self-intersecting
    assert polygon_iou(bowtie, rect(0, 0, 10, 10)) == 0.0
    assert polygon_iou(rect(0, 0, 10, 0), rect(0, 0, 10, 10)) == 0.0  # no area


def test_ignored_region_and_detections_inside_it_do_not_count():
    gt = [region(0, 0, 100, 20), region(0, 50, 100, 70), region(200, 0, 300, 40, "###")]
    det = [rect(0, 0, 100, 20),  # region 0
           rect(210, 5, 290, 35),  # all inside the ### region: dropped
           rect(180, 0, 220, 40),  # exactly half inside it, not more: counts, and matches nothing
           rect(400, 400, 450, 420)]  # nothing there
    page = match_page(gt, det)
    assert (page.gt_care, page.det_care, page.matched) == (2, 3, 1)
    assert page.pairs == ((0, 0, pytest.approx(1.0)),)
    scores = detection_scores([gt], [det])
    assert scores["precision_pct"] == pytest.approx(100 / 3)
    assert scores["recall_pct"] == pytest.approx(50.0)
    assert scores["hmean_pct"] == pytest.approx(40.0)  # 2 * (1/3) * (1/2) / (1/3 + 1/2)


def test_ignore_flag_and_star_transcription_also_mark_dont_care():
    gt = [region(0, 0, 100, 20, ignore=True), region(0, 50, 100, 70, "*"), region(0, 100, 100, 120)]
    det = [rect(0, 0, 100, 20), rect(0, 50, 100, 70), rect(0, 100, 100, 120)]
    page = match_page(gt, det)
    assert (page.gt_care, page.det_care, page.matched) == (1, 1, 1)


def test_one_region_matches_one_detection_only():
    gt = [region(0, 0, 200, 20)]
    det = [rect(0, 0, 160, 20), rect(0, 0, 200, 20)]  # IoU 0.8, then a perfect duplicate
    page = match_page(gt, det)
    # greedy in detection order, as PaddleOCR: the first box over 0.5 takes the region, the exact one is extra
    assert page.matched == 1 and page.pairs[0][:2] == (0, 0)
    scores = detection_scores([gt], [det])
    assert (scores["precision_pct"], scores["recall_pct"]) == (pytest.approx(50.0), pytest.approx(100.0))


def test_one_detection_spanning_two_regions_matches_neither():
    gt = [region(0, 0, 100, 20), region(110, 0, 210, 20)]
    det = [rect(0, 0, 210, 20)]  # IoU 100/210 with each
    scores = detection_scores([gt], [det])
    assert scores["matched"] == 0 and scores["hmean_pct"] == 0.0


@pytest.mark.parametrize(("right", "matched"), [(49, 0), (50, 0), (51, 1)])
def test_iou_must_be_strictly_above_the_threshold(right, matched):
    # a 100 x 10 region and a box over its first `right` columns: IoU = right / 100
    assert polygon_iou(rect(0, 0, 100, 10), rect(0, 0, right, 10)) == pytest.approx(right / 100)
    assert match_page([region(0, 0, 100, 10)], [rect(0, 0, right, 10)]).matched == matched


def test_counts_are_summed_over_pages_before_dividing():
    gt_pages = [[region(0, 0, 100, 20)], [region(0, 0, 100, 20), region(0, 50, 100, 70), region(0, 90, 100, 110)]]
    det_pages = [[rect(0, 0, 100, 20)], []]
    scores = detection_scores(gt_pages, det_pages)
    # per page recall would average to (100 + 0) / 2 = 50; summed it is 1 of 4
    assert scores["recall_pct"] == pytest.approx(25.0) and scores["precision_pct"] == pytest.approx(100.0)
    assert scores["hmean_pct"] == pytest.approx(40.0)
    assert (scores["gt_boxes"], scores["det_boxes"], scores["matched"]) == (4, 1, 1)


def test_invalid_polygons_are_left_out_on_both_sides():
    bowtie = [[0, 0], [10, 10], [10, 0], [0, 10]]
    gt = [region(0, 0, 100, 20), {"points": bowtie, "transcription": "x"}]
    det = [rect(0, 0, 100, 20), np.asarray(bowtie, np.float32)]
    page = match_page(gt, det)
    assert (page.gt_care, page.det_care, page.matched) == (1, 1, 1)


def test_empty_pages_follow_paddleocr_zero_convention():
    nothing = detection_scores([[]], [[]])
    assert (nothing["precision_pct"], nothing["recall_pct"], nothing["hmean_pct"]) == (0.0, 0.0, 0.0)
    missed = detection_scores([[region(0, 0, 100, 20)]], [[]])
    assert (missed["precision_pct"], missed["recall_pct"]) == (0.0, 0.0)
    invented = detection_scores([[]], [[rect(0, 0, 100, 20)]])
    assert (invented["precision_pct"], invented["recall_pct"]) == (0.0, 0.0)
    with pytest.raises(ValueError, match="pages"):
        detection_scores([[]], [])


def test_box_agreement_scores_int8_against_fp32_boxes():
    fp32 = [[rect(0, 0, 100, 20), rect(0, 50, 100, 70)], [rect(0, 0, 50, 50)]]
    assert box_agreement(fp32, fp32) == pytest.approx(1.0)
    # INT8 misses one of three boxes and shifts another a little: precision 1, recall 2/3
    int8 = [[rect(2, 1, 101, 21)], [rect(0, 0, 50, 50)]]
    assert box_agreement(fp32, int8) == pytest.approx(0.8)
    assert box_agreement([[], []], [[], []]) == 1.0
    assert box_agreement([[], []], [[rect(0, 0, 10, 10)], []]) == 0.0
    assert box_agreement(fp32, [[], []]) == 0.0
    with pytest.raises(ValueError, match="pages"):
        box_agreement([[]], [[], []])


def test_page_hmean_uses_paddleocr_per_image_convention_for_empty_pages():
    assert page_hmean(match_page([], [])) == 1.0  # nothing to find, nothing found
    assert page_hmean(match_page([], [rect(0, 0, 10, 10)])) == 0.0
    assert page_hmean(match_page([region(0, 0, 10, 10)], [])) == 0.0
    assert page_hmean(match_page([region(0, 0, 10, 10, "###")], [rect(0, 0, 10, 10)])) == 1.0  # only don't-care
    two_of_three = match_page([region(0, 0, 100, 20), region(0, 50, 100, 70)], [rect(0, 0, 100, 20)])
    assert page_hmean(two_of_three) == pytest.approx(2 / 3)  # P = 1, R = 1/2
