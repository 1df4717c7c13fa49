"""The INT8 search judges each candidate in every runtime the gate judges, through one seam (`TrialRunner.judge`).

The gate judges every runtime in evaluate.runtimes with its own thresholds; a search that judged in onnxruntime
alone passed a trial that OpenVINO's lowering of the same QDQ model then failed on the test split. Here the digits
pipeline's trained model (tests/conftest.py) is calibrated by PaddleSlim once and judged in onnxruntime, OpenVINO
and Paddle Inference; a candidate no PaddleSlim run produced (the FP32 ONNX model itself) goes through the same
seam, with Paddle Inference not applicable to it. Thresholds that only OpenVINO's numbers miss are built from what
this run measured.
"""

from __future__ import annotations

import json
import shutil

import pytest

from quantgate.artifacts.cache import ContentCache
from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig, QuantizeRecipe
from quantgate.stages.quantize.runtime_checks import NOT_JUDGED, OUTCOMES_RUNTIME, RUNTIMES_KEY, Candidate
from quantgate.stages.quantize.trials import TrialRunner

pytest.importorskip("openvino")

ALL_RUNTIMES = ("onnxruntime", "openvino", "paddle_inference")
# Judged (not every threshold is open), yet the digits CNN passes it anywhere: what differs is the runtimes judged.
GATED = GatePolicy(max_accuracy_drop=100.0, min_agreement=0.01, min_speedup=0.0)
QUANTIZE = QuantizeConfig(search={"recipes": [{}], "latency_repeats": 3})


def runner(stage_dirs, root, name: str, policy: GatePolicy, runtimes: tuple[str, ...]) -> TrialRunner:
    scratch = root / name
    scratch.mkdir()
    # One store: a second runner takes the first one's PaddleSlim calibration from it instead of running it again.
    cache = ContentCache(root / "store", "quantize-search")
    return TrialRunner(QUANTIZE, policy, EvaluateConfig(runtimes=runtimes, latency_repeats=3), stage_dirs.export,
                       stage_dirs.data, scratch, cache)


def plain_ptq(trials: TrialRunner):
    return trials.run_trial("recipe", trials.config.with_recipe(QuantizeRecipe()), ())


@pytest.fixture(scope="module")
def judged(stage_dirs, tmp_path_factory):
    """One PaddleSlim trial judged in all three runtimes."""
    root = tmp_path_factory.mktemp("search_runtimes")
    trials = runner(stage_dirs, root, "all", GATED, ALL_RUNTIMES)
    return root, trials, plain_ptq(trials)


def test_a_paddleslim_trial_is_judged_in_every_gated_runtime_each_against_its_own_fp32(judged):
    _, trials, trial = judged
    entries = trial.validation[RUNTIMES_KEY]
    assert list(entries) == list(ALL_RUNTIMES) and trial.producer == "paddleslim"
    for runtime, entry in entries.items():
        assert NOT_JUDGED not in entry, runtime
        assert entry["validation_samples"] == trial.validation["validation_samples"]
        assert 0.0 <= entry["agreement"] <= 1.0 and entry["passed"] and entry["failures"] == []
        assert entry["latency_ms_p50_fp32"] > 0 and entry["speedup_int8_vs_fp32"] > 0  # timed in that runtime
        # each runtime's FP32 is its own reference: its FP32 accuracy is what it read itself
        assert entry["fp32_top1_pct"] == pytest.approx(trials.checks.check(runtime).fp32_top1_pct)
    # the top level stays onnxruntime's numbers, which the search ranks and records by
    for key in ("accuracy_drop_pts", "agreement", "int8_top1_pct", "logit_error"):
        assert trial.validation[key] == entries["onnxruntime"][key]
    # the per-sample outcomes kept are the binding runtime's: the one that lost the most against its own FP32
    binding = trial.validation[OUTCOMES_RUNTIME]
    assert entries[binding]["accuracy_drop_pts"] == max(entry["accuracy_drop_pts"] for entry in entries.values())
    assert trial.outcomes.mean() * 100 == pytest.approx(entries[binding]["int8_top1_pct"])
    assert trial.passed and trial.failures == []
    record = json.loads(json.dumps(trial.record()))  # search.json holds all of it
    assert set(record["validation"][RUNTIMES_KEY]) == set(ALL_RUNTIMES) and record["producer"] == "paddleslim"


def test_a_threshold_only_openvinos_numbers_miss_fails_the_trial_and_names_openvino(judged, stage_dirs):
    root, _, first = judged
    measured = first.validation[RUNTIMES_KEY]["openvino"]["int8_top1_pct"]
    assert measured < 100.0  # else no floor above it exists
    # onnxruntime's floor is open; OpenVINO's sits just above what OpenVINO's INT8 read on the validation split
    policy = GatePolicy(max_accuracy_drop=100.0, min_agreement=0.01, min_speedup=0.0,
                        min_int8_accuracy={"onnxruntime": 0.0, "openvino": min(measured + 0.5, 100.0)})
    trials = runner(stage_dirs, root, "openvino_floor", policy, ("onnxruntime", "openvino"))
    trial = plain_ptq(trials)
    assert trial.calibration_cached  # the same PaddleSlim model as the first runner's: only the policy differs
    entries = trial.validation[RUNTIMES_KEY]
    assert entries["onnxruntime"]["passed"] and not entries["openvino"]["passed"]
    assert not trial.passed
    assert trial.failures and all(failure.startswith("openvino: int8_top1_pct") for failure in trial.failures)


def test_a_runtime_whose_thresholds_are_all_open_is_skipped_and_the_record_says_why(stage_dirs, tmp_path):
    policy = GatePolicy(max_accuracy_drop={"onnxruntime": 1.0, "openvino": 100.0}, min_agreement=0.0,
                        min_speedup=0.0)
    trials = runner(stage_dirs, tmp_path, "open", policy, ("onnxruntime", "openvino"))
    assert trials.checks.runtimes == ("onnxruntime",)
    assert "open for openvino" in trials.checks.skipped["openvino"]


def test_a_candidate_no_paddleslim_run_produced_is_judged_through_the_same_seam(judged):
    root, trials, _ = judged
    folder = root / "outside"
    folder.mkdir()
    shutil.copy2(trials.fp32_onnx, folder / "int8.onnx")  # the FP32 model itself, standing in for another producer
    candidate = Candidate(int8_onnx=folder / "int8.onnx", program=None, recipe={"algo": "none"}, float_layers=(),
                          calibration_samples=0, calibration_digest="", calibration_s=0.0, produced_s=0.0,
                          producer="onnx-graph")
    trial = trials.judge(99, "recipe", candidate)
    entries = trial.validation[RUNTIMES_KEY]
    assert "not applicable" in entries["paddle_inference"][NOT_JUDGED]
    for runtime in ("onnxruntime", "openvino"):  # FP32 against its own FP32: nothing lost, every sample agrees
        assert entries[runtime]["accuracy_drop_pts"] == 0.0 and entries[runtime]["agreement"] == 1.0
    assert trial.passed and trial.producer == "onnx-graph" and trial.folder == folder
    assert trial not in trials.trials  # judging is not a trial of the budget; run_trial adds those
