import json
import math

import numpy as np
import pytest

from quantgate.config import ConfigError, GatePolicy, validate_config
from quantgate.flows.duel import evidence
from quantgate.policy.decision import ReleaseDuel, decide, paired_bootstrap_delta
from quantgate.stages.duel import outputs as duel
from quantgate.stages.gate.decision import gate

GOOD = {"fp32_top1_pct": 97.5, "int8_top1_pct": 97.0, "agreement": 0.99, "speedup_int8_vs_fp32": 1.8}


def by_name(decision) -> dict:
    return {criterion.name: criterion for criterion in decision.criteria}


def test_a_model_within_policy_passes(tmp_path):
    decision = gate(GatePolicy(), GOOD, tmp_path)
    assert decision.passed and not decision.failed
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["passed"] is True and record["policy"]["max_accuracy_drop"] == 1.0
    assert {c["name"] for c in record["criteria"]} == {
        "accuracy_drop_pts", "agreement", "int8_top1_pct", "delta_ci95_low_pts", "release_regression_pts",
        "stale_evidence", "speedup"}
    for criterion in record["criteria"]:  # the shape later criteria (e.g. speed-up) share
        assert {"name", "measured", "threshold", "comparison", "unit", "passed", "verdict", "note"} <= set(criterion)


def test_each_failed_criterion_is_named_with_value_and_threshold():
    decision = decide(GatePolicy(max_accuracy_drop=0.25, min_agreement=0.995), GOOD)
    assert not decision.passed
    described = [criterion.describe() for criterion in decision.failed]
    assert described == [
        "accuracy_drop_pts = 0.5 pts (must be <= 0.25) FAILED",
        "agreement = 0.99 fraction (must be >= 0.995) FAILED",
    ]


def test_missing_or_nan_metrics_fail_closed():
    for broken in ({**GOOD, "agreement": math.nan}, {k: v for k, v in GOOD.items() if k != "int8_top1_pct"},
                   {**GOOD, "fp32_top1_pct": "97"}, {**GOOD, "agreement": None}, {}):
        decision = decide(GatePolicy(max_accuracy_drop=100, min_agreement=0), broken)
        assert not decision.passed
        assert any(criterion.measured is None and criterion.verdict == "fail" for criterion in decision.failed)


def test_stale_evidence_fails_the_gate_and_says_why():
    decision = decide(GatePolicy(), GOOD, stale=("convert manifest changed after evaluate read it",))
    assert not decision.passed
    stale = by_name(decision)["stale_evidence"]
    assert stale.verdict == "fail" and stale.measured == 1 and "convert manifest changed" in stale.note


def duel_against(folder, version: str, release_right: int, candidate_right: int, samples: int = 200) -> ReleaseDuel:
    """A duel record and its paired file: the release right on the first `release_right` samples, this
    version on the first `candidate_right`."""
    references = np.zeros(samples, np.int64)
    release_pred, candidate_pred = np.ones(samples, np.int64), np.ones(samples, np.int64)
    release_pred[:release_right], candidate_pred[:candidate_right] = 0, 0
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "paired_onnxruntime.npz", rows=np.arange(samples), sample_ids=np.arange(samples).astype(str),
             references=references, release_pred=release_pred, candidate_pred=candidate_pred)
    numbers = {duel.RELEASE_INT8_TOP1: 100 * release_right / samples,
               duel.CANDIDATE_INT8_TOP1: 100 * candidate_right / samples}
    numbers[duel.REGRESSION] = numbers[duel.RELEASE_INT8_TOP1] - numbers[duel.CANDIDATE_INT8_TOP1]
    record = {duel.STATUS: duel.PAIRED, duel.PAIRED_SAMPLES: samples, duel.TEST_SAMPLES: samples,
              duel.DROPPED_OVERLAP: 0, duel.PAIRED_FINGERPRINT: "ab" * 32,
              duel.RUNTIMES: {"onnxruntime": {**numbers, duel.PAIRED_FILE: "paired_onnxruntime.npz"}}}
    return evidence(version, record, folder)


def test_regression_vs_release_is_not_applicable_without_a_release_and_checked_with_one(tmp_path):
    first = by_name(decide(GatePolicy(), GOOD))["release_regression_pts"]
    assert first.verdict == "not_applicable" and first.passed and "no release" in first.note
    assert first.describe() == "release_regression_pts: not applicable (no release version yet, nothing to compare with)"

    release = duel_against(tmp_path, "v4", release_right=196, candidate_right=194)  # 98 % vs 97 % on the same 200
    within = decide(GatePolicy(max_release_regression=1.0), GOOD, release=release)
    assert within.passed and by_name(within)["release_regression_pts"].measured == pytest.approx(1.0)

    worse = decide(GatePolicy(max_release_regression=0.5), GOOD, release=release)
    regression = by_name(worse)["release_regression_pts"]
    assert not worse.passed and regression.verdict == "fail" and "vs release v4" in regression.note
    assert regression.note.startswith("paired on 200 samples")
    # With require_ci_within_drop the paired interval's upper bound must clear the threshold too.
    strict = decide(GatePolicy(max_release_regression=1.0, require_ci_within_drop=True), GOOD, release=release)
    assert not by_name(strict)["release_regression_pts"].passed and "upper bound" in by_name(strict)[
        "release_regression_pts"].note


def test_an_unverifiable_release_fails_closed():
    release = ReleaseDuel("v4", problem="duel/manifest.json changed after it was committed")
    decision = decide(GatePolicy(max_release_regression=100), GOOD, release=release)
    regression = by_name(decision)["release_regression_pts"]
    assert not decision.passed and regression.measured is None and "changed after it was committed" in regression.note


def test_paired_numbers_the_paired_file_does_not_reproduce_fail_closed(tmp_path):
    release = duel_against(tmp_path, "v4", release_right=196, candidate_right=196)
    forged = ReleaseDuel("v4", {**release.metrics, duel.RUNTIMES: {"onnxruntime": {
        **release.metrics[duel.RUNTIMES]["onnxruntime"], duel.RELEASE_INT8_TOP1: 90.0}}}, release.paired)
    regression = by_name(decide(GatePolicy(), GOOD, release=forged))["release_regression_pts"]
    assert not regression.passed and "does not match the paired file" in regression.note


def paired_predictions(n: int, fp32_wrong: float, int8_wrong: float, seed: int = 3):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    fp32 = np.where(rng.random(n) < fp32_wrong, (labels + 1) % 10, labels)
    int8 = np.where(rng.random(n) < int8_wrong, (labels + 2) % 10, fp32)
    return labels, fp32, int8


def test_bootstrap_interval_contains_the_delta_is_seeded_and_narrows_with_more_samples():
    labels, fp32, int8 = paired_predictions(200, 0.05, 0.04)
    small = paired_bootstrap_delta(labels, fp32, int8, resamples=2000, seed=0)
    point = 100 * (np.mean(int8 == labels) - np.mean(fp32 == labels))
    assert small.delta_pts == pytest.approx(point) and small.delta_pts < 0
    assert small.low_pts <= small.delta_pts <= small.high_pts and small.low_pts < small.high_pts
    assert paired_bootstrap_delta(*paired_predictions(200, 0.05, 0.04), resamples=2000, seed=0) == small
    assert paired_bootstrap_delta(*paired_predictions(200, 0.05, 0.04), resamples=2000, seed=1) != small
    labels, fp32, int8 = paired_predictions(5000, 0.05, 0.04)
    large = paired_bootstrap_delta(labels, fp32, int8, resamples=2000, seed=0)
    assert large.high_pts - large.low_pts < (small.high_pts - small.low_pts) / 3
    # With many samples the percentile interval approaches the normal one: mean +- 1.96 standard errors.
    per_sample = 100 * ((int8 == labels).astype(float) - (fp32 == labels).astype(float))
    half_width = 1.96 * per_sample.std(ddof=1) / np.sqrt(len(per_sample))
    assert (large.high_pts - large.low_pts) / 2 == pytest.approx(half_width, rel=0.1)
    # Identical predictions: every resample has delta 0.
    labels, fp32, _ = paired_predictions(100, 0.1, 0)
    same = paired_bootstrap_delta(labels, fp32, fp32, resamples=500, seed=0)
    assert (same.low_pts, same.delta_pts, same.high_pts) == (0.0, 0.0, 0.0)


def save_predictions(folder, labels, fp32, int8):
    path = folder / "predictions.npz"
    np.savez(path, labels=labels, fp32_pred=fp32, int8_pred=int8)
    return path


def metrics_of(labels, fp32, int8) -> dict:
    return {"fp32_top1_pct": 100 * float(np.mean(fp32 == labels)), "int8_top1_pct": 100 * float(np.mean(int8 == labels)),
            "agreement": float(np.mean(fp32 == int8)), "speedup_int8_vs_fp32": 1.5}


def test_the_interval_can_be_required_to_stay_above_minus_max_drop(tmp_path):
    labels, fp32, int8 = paired_predictions(150, 0.05, 0.06)
    predictions = save_predictions(tmp_path, labels, fp32, int8)
    metrics = metrics_of(labels, fp32, int8)
    loose = GatePolicy(max_accuracy_drop=10, min_agreement=0)
    informational = gate(loose, metrics, tmp_path, predictions)
    ci = by_name(informational)["delta_ci95_low_pts"]
    assert informational.passed and ci.verdict == "not_applicable" and ci.measured is not None
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["delta_interval"]["low_pts"] == ci.measured and record["delta_interval"]["resamples"] == 2000

    # The point estimate stays within the drop, but the interval's lower bound does not.
    drop = metrics["fp32_top1_pct"] - metrics["int8_top1_pct"]
    strict = loose.model_copy(update={"max_accuracy_drop": drop + 0.01, "require_ci_within_drop": True})
    decision = gate(strict, metrics, tmp_path, predictions)
    assert by_name(decision)["accuracy_drop_pts"].passed
    assert not decision.passed and [c.name for c in decision.failed] == ["delta_ci95_low_pts"]

    required_without_predictions = decide(strict, metrics)
    assert by_name(required_without_predictions)["delta_ci95_low_pts"].measured is None
    assert not required_without_predictions.passed


def test_predictions_that_do_not_reproduce_the_metrics_are_stale(tmp_path):
    labels, fp32, int8 = paired_predictions(150, 0.05, 0.02)
    predictions = save_predictions(tmp_path, labels, fp32, int8)
    metrics = {**metrics_of(labels, fp32, int8), "int8_top1_pct": 99.9}
    decision = gate(GatePolicy(max_accuracy_drop=100, min_agreement=0), metrics, tmp_path, predictions)
    assert not decision.passed
    assert "int8_top1_pct 99.9000 does not match the stored predictions" in by_name(decision)["stale_evidence"].note


def test_new_policy_fields_are_validated_with_the_rest():
    with pytest.raises(ConfigError) as caught:
        validate_config({"gate": {"bootstrap_resamples": 10, "max_release_regression": -1, "require_ci_within_drop": "maybe"}})
    assert [problem.split(":")[0] for problem in caught.value.problems] == [
        "gate.max_release_regression", "gate.require_ci_within_drop", "gate.bootstrap_resamples"]


def test_an_int8_model_slower_than_fp32_fails_the_default_policy():
    assert GatePolicy().min_speedup == 1.0
    slower = decide(GatePolicy(), {**GOOD, "speedup_int8_vs_fp32": 0.45})
    assert not slower.passed
    assert [criterion.describe() for criterion in slower.failed] == ["speedup = 0.45 x (must be >= 1) FAILED"]
    assert decide(GatePolicy(), {**GOOD, "speedup_int8_vs_fp32": 2.6}).passed


def test_a_missing_or_nan_speedup_fails_even_with_the_floor_off():
    without = {key: value for key, value in GOOD.items() if key != "speedup_int8_vs_fp32"}
    for broken in ({**GOOD, "speedup_int8_vs_fp32": math.nan}, without, {**GOOD, "speedup_int8_vs_fp32": None}):
        decision = decide(GatePolicy(min_speedup=0.0), broken)
        assert [criterion.name for criterion in decision.failed] == ["speedup"]


def test_the_gate_judges_the_speedup_the_evaluation_measured(stage_dirs, tmp_path):
    metrics = stage_dirs.results["evaluate"].metrics
    assert metrics["speedup_int8_vs_fp32"] == metrics["latency_ms_p50_fp32"] / metrics["latency_ms_p50_int8"]
    # No onnxruntime model runs 1000x faster than its FP32 twin: the measured value must fail this floor.
    decision = gate(GatePolicy(max_accuracy_drop=100, min_agreement=0, min_speedup=1000), metrics, tmp_path)
    assert [criterion.name for criterion in decision.failed] == ["speedup"]
    assert decision.failed[0].measured == metrics["speedup_int8_vs_fp32"]
