"""A system's reading is judged line by line against the page's labels (quantgate/ocr/matching.py): found means a
box at IoU >= 0.5, read means the exact text; ignored regions cost nothing; and two systems are compared on the
lines where their outcomes differ. Every number here is worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from quantgate.ocr.matching import compare_systems, match_lines, system_scores


def rect(x: float, y: float, width: float = 100, height: float = 30) -> np.ndarray:
    return np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]], np.float64)


def label(points: np.ndarray, text: str) -> dict:
    return {"points": points.tolist(), "transcription": text}


PAGE_A = [label(rect(0, 0), "发票号码"), label(rect(0, 50), "金额100"), label(rect(0, 100), "###"),
          label(rect(0, 150), "王伟")]
PAGE_B = [label(rect(0, 0, 200), "No.12345678"), label(rect(0, 50), "税率13%"), label(rect(0, 100, 200), "日期2024-01-01")]


def test_a_page_read_exactly_is_all_matched_and_exact():
    read = [(rect(0, 0), "发票号码"), (rect(0, 50), "金额100"), (rect(0, 150), "王伟")]
    match = match_lines(PAGE_A, read)
    assert match.gt_read == (0, 1, None, 2)
    assert (match.gt_lines, match.read_lines, match.matched, match.exact) == (3, 3, 3, 3)
    assert (match.missed, match.spurious, match.errors, match.chars) == (0, 0, 0, 11)
    assert match.cer_pct == 0.0


def test_a_wrong_text_is_matched_but_not_exact_and_costs_its_edits():
    read = [(rect(0, 0), "发票号玛"), (rect(0, 50), "金额1000"), (rect(0, 150), "王伟")]
    match = match_lines(PAGE_A, read)
    assert (match.matched, match.exact) == (3, 1)
    assert (match.errors, match.chars) == (2, 11)  # one substitution, one insertion
    assert match.cer_pct == pytest.approx(100 * 2 / 11)
    assert match.readings == ("发票号玛", "金额1000", None, "王伟")


def test_a_line_no_box_found_is_missed_and_a_box_on_nothing_is_spurious():
    read = [(rect(0, 0), "发票号码"), (rect(0, 50), "金额100"), (rect(300, 300, 50, 20), "噪声")]
    match = match_lines(PAGE_A, read)
    assert (match.missed, match.spurious, match.matched) == (1, 1, 2)
    assert match.gt_read[3] is None


def test_boxes_on_an_ignored_region_are_neither_lines_nor_spurious():
    read = [(rect(0, 100), "看不清"), (rect(10, 105, 30, 20), "清")]  # the region, and a fragment inside it
    match = match_lines(PAGE_A, read)
    assert match.read_on_ignored == (True, True)
    assert (match.gt_lines, match.matched, match.spurious, match.missed) == (3, 0, 0, 3)
    assert match.ignored == (False, False, True, False) and match.gt_read[2] is None
    starred = [label(rect(0, 0), "*")]  # DetLabelEncode's other mark of an illegible region
    assert match_lines(starred, [(rect(0, 0), "x")]).read_on_ignored == (True,)


def test_an_iou_of_exactly_one_half_matches_and_just_below_does_not():
    gt = [label(rect(0, 0), "金额")]
    half = match_lines(gt, [(rect(0, 10), "金额")])  # overlap 2000 px of a 4000 px union
    assert (half.matched, half.exact) == (1, 1)
    below = match_lines(gt, [(rect(0, 10.01), "金额")])  # 1999 / 4001 = 0.4996
    assert (below.matched, below.missed, below.spurious) == (0, 1, 1)
    assert match_lines(gt, [(rect(0, 10.01), "金额")], iou_threshold=0.4).matched == 1


def test_two_boxes_on_one_line_give_one_match_by_the_higher_iou_and_one_spurious_box():
    gt = [label(rect(0, 0), "金额100")]
    read = [(rect(0, 3), "金额100"), (rect(0, 0), "金额10")]  # IoU 0.82 with the right text, 1.0 with the wrong
    match = match_lines(gt, read)
    assert match.gt_read == (1,) and match.readings == ("金额10",)
    assert (match.matched, match.exact, match.spurious, match.errors) == (1, 0, 1, 1)


def test_the_higher_iou_wins_a_box_two_lines_want():
    gt = [label(rect(0, 0), "上"), label(rect(0, 10), "下")]  # two overlapping labels
    match = match_lines(gt, [(rect(0, 7), "下")])  # IoU 0.62 with the upper one, 0.82 with the lower
    assert match.gt_read == (None, 0) and (match.missed, match.spurious) == (1, 0)


def test_a_label_with_its_corners_out_of_order_is_scored_by_the_area_it_covers():
    # A bow tie: two triangles of 750 px each, half of the read box, so IoU 1500 / 3000 = 0.5 exactly.
    crossed = {"points": [[0, 0], [100, 0], [0, 30], [100, 30]], "transcription": "乱序"}
    assert match_lines([crossed], [(rect(0, 0), "乱序")]).exact == 1
    assert match_lines([crossed], [(rect(0, 0), "乱序")], iou_threshold=0.51).matched == 0


# Page A: 发票号码 exact; 金额100 read 金额1000 (1 edit); ### covered; 王伟 missed; one box on nothing.
# Page B: No.12345678 read No.12345679 (1 edit); 税率13% exact; 日期2024-01-01 missed.
REFERENCE = [[(rect(0, 0), "发票号码"), (rect(0, 50), "金额1000"), (rect(0, 100), "看不清"), (rect(300, 300), "噪")],
             [(rect(0, 0, 200), "No.12345679"), (rect(0, 50), "税率13%")]]
# Page A: 发票号码 read 发票号玛 (1 edit); 金额1000 as the reference; 王伟 found and exact. Page B: No. line missed.
CANDIDATE = [[(rect(0, 0), "发票号玛"), (rect(0, 52), "金额1000"), (rect(0, 150), "王伟")],
             [(rect(0, 50), "税率13%")]]


def test_system_scores_add_up_over_pages():
    scores = system_scores([PAGE_A, PAGE_B], REFERENCE)
    assert scores["gt_lines"] == 6 and scores["read_lines"] == 6
    assert (scores["matched_lines"], scores["exact_lines"], scores["missed_lines"]) == (4, 2, 2)
    assert (scores["spurious_lines"], scores["ignored_reads"]) == (1, 1)
    assert scores["e2e_line_accuracy_pct"] == pytest.approx(100 * 2 / 6)
    assert (scores["char_errors"], scores["matched_chars"]) == (2, 4 + 5 + 11 + 5)
    assert scores["cer_matched_pct"] == pytest.approx(8.0)


def test_compare_systems_lists_the_lines_read_differently_and_their_agreement():
    result = compare_systems([PAGE_A, PAGE_B], REFERENCE, CANDIDATE)
    assert result["differing_lines"] == [(0, 0, "发票号码", "发票号玛"), (0, 3, None, "王伟"),
                                         (1, 0, "No.12345679", None)]
    # Agreed: 金额 (the same wrong text), 税率 (both right), 日期 (both missed): 3 of 6; ### is no line.
    assert result["line_agreement"] == pytest.approx(0.5)
    assert result["candidate"]["e2e_line_accuracy_pct"] == pytest.approx(100 * 2 / 6)
    assert result["e2e_line_drop_pts"] == pytest.approx(0.0)
    assert result["candidate"]["cer_matched_pct"] == pytest.approx(100 * 2 / 16)
    assert result["cer_increase_pts"] == pytest.approx(12.5 - 8.0)


def test_identical_systems_agree_on_every_line():
    result = compare_systems([PAGE_A, PAGE_B], REFERENCE, REFERENCE)
    assert result["line_agreement"] == 1.0 and result["differing_lines"] == []
    assert result["e2e_line_drop_pts"] == 0.0 and result["cer_increase_pts"] == 0.0


def test_a_system_that_finds_nothing_has_no_matched_cer():
    scores = system_scores([PAGE_A], [[]])
    assert scores["cer_matched_pct"] is None and scores["e2e_line_accuracy_pct"] == 0.0
    assert compare_systems([PAGE_A], REFERENCE[:1], [[]])["cer_increase_pts"] is None


def test_pages_without_a_line_to_read_are_refused():
    with pytest.raises(ValueError, match="no ground-truth line"):
        system_scores([[label(rect(0, 0), "###")]], [[]])


def test_page_counts_must_agree():
    with pytest.raises(ValueError, match="2 pages of ground truth but 1"):
        system_scores([PAGE_A, PAGE_B], [[]])


def test_a_malformed_label_is_refused_naming_its_page_and_line():
    with pytest.raises(ValueError, match="page 1: ground-truth line 0"):
        system_scores([PAGE_A, [{"points": [[0, 0], [1, 1]], "transcription": "x"}]], [[], []])
