"""How the search chooses between candidates, and on what evidence: both passing, the faster; neither passing,
a McNemar test on the samples they read differently, then how close their outputs are to FP32's.

Trials are built directly with scripted per-sample outcomes (200 validation lines, as on PP-OCRv4's recognizer);
the outcomes, the KL divergence and the intervals themselves come from the search's check on a tiny real text
recognizer (onnx.helper, no training) and on the digits pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_task_metrics import HEIGHT, LINES, text_data_folder, toy_recognizer

from quantgate.samples.reading import open_data
from quantgate.stages.quantize.evidence import ALPHA
from quantgate.stages.quantize.search import written_model
from quantgate.stages.quantize import evidence
from quantgate.stages.quantize.trials import Trial, closest, kept_trial
from quantgate.stages.quantize.validation_check import ValidationCheck

SAMPLES = 200


def outcomes(wrong: range | list[int] = ()) -> np.ndarray:
    """200 validation lines, all read right but `wrong`."""
    read = np.ones(SAMPLES, bool)
    read[list(wrong)] = False
    return read


def trial(index: int, read: np.ndarray | None, distance: float, *, kl: float | None = None, passed: bool = False,
          speedup: float = 1.5, float_layers: tuple[str, ...] = ()) -> Trial:
    right = SAMPLES if read is None else int(read.sum())
    validation = {"validation_samples": SAMPLES, "fp32_top1_pct": 100.0, "int8_top1_pct": 100.0 * right / SAMPLES,
                  "accuracy_drop_pts": 100.0 * (SAMPLES - right) / SAMPLES, "agreement": right / SAMPLES,
                  "logit_error": distance, **({} if kl is None else {"output_kl": kl})}
    return Trial(index, "recipe", {"algo": "hist"}, list(float_layers), validation, passed, [] if passed else ["x"],
                 10.0, 10.0 / speedup, speedup, seconds=60.0, calibration_cached=False, calibration_digest="",
                 calibration_samples=256, calibration_s=30.0, statistics_reused=False, folder=Path("."),
                 paddle2onnx_file=Path("."), outcomes=read)


def test_one_line_in_200_decides_nothing_the_closer_outputs_do():
    one_more_line = trial(1, outcomes(range(9)), 0.0425)  # 'hist': one line more read right
    closer_outputs = trial(2, outcomes(range(10)), 0.0375)  # 'mse'
    chosen, decisions = evidence.closest([one_more_line, closer_outputs])
    assert chosen is closer_outputs
    [decision] = decisions
    assert (decision["b"], decision["c"], decision["p_value"]) == (1, 0, 0.5) and decision["rule"] == "distance"
    assert decision["reason"] == ("inconclusive (p=0.50, 1 vs 0 samples read differently): closer outputs "
                                  "(logit error 0.0375 vs 0.0425)")
    assert decision["distance"] == [0.0425, 0.0375] and decision["winner"] == 2 and decision["trials"] == [1, 2]


def test_a_clear_difference_in_lines_read_decides_whatever_the_outputs():
    better = trial(1, outcomes([12]), 0.05)  # reads 12 lines the other misses, misses 1 the other reads
    closer_outputs = trial(2, outcomes(range(12)), 0.01)
    for order in ([better, closer_outputs], [closer_outputs, better]):  # the order of the trials does not matter
        chosen, [decision] = evidence.closest(order)
        assert chosen is better and decision["rule"] == "mcnemar" and (decision["b"], decision["c"]) == (12, 1)
        assert decision["p_value"] == pytest.approx(14 / 2 ** 13) and decision["p_value"] < ALPHA
        assert decision["reason"].startswith("McNemar p=0.00171 (12 vs 1 samples")


def test_text_is_decided_by_the_kl_divergence_of_the_outputs():
    first, second = trial(1, outcomes([0]), 0.01, kl=0.042), trial(2, outcomes([1]), 0.02, kl=0.031)
    chosen, [decision] = evidence.closest([first, second])
    assert chosen is second and decision["distance_name"] == "output_kl"
    assert decision["reason"].endswith("closer outputs (KL 0.031 vs 0.042)") and "(p=0.75, 1 vs 1" in decision["reason"]


def test_a_trial_shown_worse_than_the_best_reading_one_cannot_come_back_by_its_outputs():
    reference = trial(1, outcomes([]), 0.05)  # reads every line
    nearly = trial(2, outcomes([0, 1]), 0.03)  # 2 lines fewer: not shown worse (p 0.25)
    worse = trial(3, outcomes(range(8)), 0.001)  # 8 fewer: p 0.004, out, though its outputs are the closest
    chosen, decisions = evidence.closest([reference, nearly, worse])
    assert chosen is nearly
    assert [(d["trials"], d["rule"], d["winner"]) for d in decisions] == [([1, 3], "mcnemar", 1),
                                                                           ([1, 2], "distance", 2)]
    assert closest([worse, nearly, reference]) is nearly  # the same choice in any order


def test_without_per_sample_outcomes_the_drop_decides_and_the_decision_says_so():
    near, far = trial(1, None, 0.04), trial(2, None, 0.01)
    far.validation["accuracy_drop_pts"] = 2.5  # 5 lines of 200 behind
    chosen, [decision] = evidence.closest([near, far])
    assert chosen is near and decision["rule"] == "drop" and decision["p_value"] is None
    assert decision["reason"].startswith("no per-sample outcomes: drop 0.00 vs 2.50 pts")


def test_of_two_passing_trials_the_faster_is_kept_fewer_fp32_layers_only_break_a_tie():
    slower = trial(1, outcomes(), 0.01, passed=True, speedup=1.70)
    faster = trial(2, outcomes([3]), 0.02, passed=True, speedup=1.82, float_layers=("conv2d_3.w_0",))
    chosen, [decision] = evidence.kept([slower, faster])
    assert chosen is faster and decision["rule"] == "faster" and decision["speedup"] == [1.70, 1.82]
    assert decision["reason"] == "both pass; faster (1.820x vs 1.700x INT8/FP32)"
    tied = trial(3, outcomes(), 0.01, passed=True, speedup=1.82)
    assert kept_trial([faster, tied]) is tied  # the same speed-up: the one with fewer FP32 layers
    assert kept_trial([trial(4, outcomes(), 0.0), faster]) is faster  # a passing trial over a closer one that misses


def test_the_decisions_are_json_and_the_outcomes_stay_out_of_the_trial_record():
    trials = [trial(1, outcomes([1, 2]), 0.04, kl=0.5), trial(2, outcomes([5]), 0.03, kl=0.4),
              trial(3, outcomes(range(20)), 0.01, kl=0.1)]
    _, decisions = evidence.closest(trials)
    assert json.loads(json.dumps(decisions, allow_nan=False)) == decisions
    assert set(decisions[0]) == {"trials", "winner", "rule", "reason", "b", "c", "p_value", "alpha", "distance_name",
                                 "distance", "accuracy_drop_pts", "speedup"}
    record = trials[0].record()
    assert "outcomes" not in record and "folder" not in record
    assert {"latency_batch_size", "latency_ms_p50_fp32_batch1", "latency_ms_p50_int8_batch1",
            "speedup_batch1"} <= set(record)


def test_the_written_model_when_neither_passes_is_chosen_on_the_same_evidence_and_recorded():
    kept, final = trial(3, outcomes(range(4)), 0.02), trial(7, outcomes(range(20)), 0.01)
    decisions: list[dict] = []
    chosen = written_model(kept, final, decisions)
    assert chosen.written is kept and chosen.note.endswith("the trials' calibration (256 samples) is closer to FP32 "
                                                            "and written")
    assert decisions[0]["purpose"] == "written model" and decisions[0]["rule"] == "mcnemar"
    assert written_model(kept, final).written is kept  # without a list to record in, as before


# -- the per-sample outcomes, the KL and the intervals from the search's check ---------------------------------

@pytest.fixture(scope="module")
def recognizers(tmp_path_factory):
    """Text lines, a recognizer ending in softmax-like one-hot scores that reads every line, one that reads every
    3 as a 4, and both again scaled into logits (no distribution: the check softmaxes them)."""
    root = tmp_path_factory.mktemp("evidence")
    data = text_data_folder(root / "data", LINES)
    identity = np.eye(HEIGHT, dtype=np.float32)
    misreads = identity.copy()
    misreads[4, 4], misreads[4, 5] = 0.0, 1.0
    for name, weight in {"right": identity, "misreads": misreads, "right_logits": 6 * identity,
                         "misreads_logits": 6 * misreads}.items():
        toy_recognizer(root / f"{name}.onnx", weight)
    return root, data


@pytest.mark.parametrize("kind", ["", "_logits"])
def test_the_check_gives_each_lines_outcome_the_kl_to_fp32_and_the_intervals(recognizers, kind):
    root, data = recognizers
    check = ValidationCheck(root / f"right{kind}.onnx", open_data(data), threads=1, batch_size=3)
    same, same_read = check.score_samples(root / f"right{kind}.onnx")
    assert same_read.tolist() == [True] * 4 and same["output_kl"] == pytest.approx(0.0, abs=1e-6)
    scores, read = check.score_samples(root / f"misreads{kind}.onnx")
    # validation lines "1234", "5567", "3", "90": the two with a 3 are misread
    assert read.tolist() == [False, True, False, True] and scores["int8_top1_pct"] == 50.0
    assert scores["output_kl"] > 0.1  # the misread frames put their mass elsewhere
    low, high = scores["int8_top1_ci95_pct"]
    assert low < 50.0 < high and high - low > 40  # 2 of 4: an interval that says how little 4 lines show
    low, high = scores["accuracy_drop_ci95_pts"]
    assert low < 50.0 < high and same["accuracy_drop_ci95_pts"][0] < 0.0 < same["accuracy_drop_ci95_pts"][1]
    assert check.score(root / f"misreads{kind}.onnx") == scores


def test_classification_has_intervals_and_no_kl(stage_dirs):
    fp32 = stage_dirs.convert / "fp32.onnx"
    check = ValidationCheck(fp32, open_data(stage_dirs.data), 1, 64)
    scores, read = check.score_samples(fp32)
    assert "output_kl" not in scores and len(read) == scores["validation_samples"]
    assert read.mean() * 100 == pytest.approx(scores["int8_top1_pct"])
    low, high = scores["int8_top1_ci95_pct"]
    assert low <= scores["int8_top1_pct"] <= high
    low, high = scores["accuracy_drop_ci95_pts"]
    assert low == pytest.approx(-high) and high > 0  # nothing changed: a symmetric interval, not [0, 0]
