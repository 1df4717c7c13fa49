"""The search's trials calibrate on a subset of the calibration split; the kept recipe is calibrated once
more on the full set, and that is the model the stage writes (quantize.search.trial_calibration_samples)."""

import dataclasses
import json

import pytest

from quantgate.artifacts.cache import ContentCache
from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig
from quantgate.stages.data import open_data
from quantgate.stages.quantize.memory_fit import CALIBRATION_CEILING
from quantgate.stages.quantize.outputs import SEARCH_FILE
from quantgate.stages.quantize.ptq import calibration_batches
from quantgate.stages.quantize.search import search_quantization
from quantgate.stages.quantize.trials import TrialRunner

# Every trial passes: what is tested is which rows calibrate which model, not the search's path.
LENIENT = GatePolicy(max_accuracy_drop=100.0, min_agreement=0.0, min_speedup=0.0)
EVALUATE = EvaluateConfig(latency_repeats=3)
TRIAL_SAMPLES = 64  # two batches of 32


def search(stage_dirs, out, cache=None, **search_settings):
    config = QuantizeConfig(search={"recipes": [{}], "latency_repeats": 3, "trial_calibration_samples": TRIAL_SAMPLES,
                                    **search_settings})
    out.mkdir()
    result = search_quantization(config, LENIENT, EVALUATE, stage_dirs.export, stage_dirs.data, out, cache)
    return result, json.loads((out / SEARCH_FILE).read_text())


def full_set_samples(stage_dirs) -> int:
    """How many rows quantize's own setting (max_calibration_samples 1024) calibrates on here, at the batch the
    digits get (the ceiling: they fit any budget)."""
    config = QuantizeConfig(batch_size=CALIBRATION_CEILING)
    samples = open_data(stage_dirs.data).size("calibration")
    return min(samples, calibration_batches(samples, config) * config.batch_size)


@pytest.fixture(scope="module")
def searched_twice(stage_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("trial_samples")
    cache = ContentCache(root / "store", "quantize-search")
    return root, search(stage_dirs, root / "first", cache), search(stage_dirs, root / "again", cache)


def test_trials_calibrate_on_the_subset_and_the_written_model_on_the_full_set(searched_twice, stage_dirs):
    _, (result, record), _ = searched_twice
    full = full_set_samples(stage_dirs)
    assert TRIAL_SAMPLES < full  # else there is nothing to test here
    assert [trial["calibration_samples"] for trial in record["trials_detail"]] == [TRIAL_SAMPLES]
    assert record["trial_calibration_samples"] == TRIAL_SAMPLES
    # The model written, and the manifest's calibration metrics, are the full set's.
    assert result.metrics["calibration_samples"] == full
    final = record["final_calibration_detail"]
    assert final["phase"] == "final" and final["calibration_samples"] == full and final["written"]
    assert final["recipe"] == record["trials_detail"][0]["recipe"] and final["float_layers"] == record["float_layers"]
    summary = result.metrics["search"]
    assert summary["final_calibration"]["calibration_samples"] == full and summary["final_calibration"]["written"]
    assert summary["final_calibration"]["calibration_s"] > 0 and summary["passed"]
    assert summary["validation"] == final["validation"]  # the verdict is the written model's
    assert record["trials"] == 1  # the final calibration is not a trial of the budget


def test_a_rerun_takes_the_trials_and_the_final_calibration_from_the_cache(searched_twice):
    root, (first, first_record), (again, record) = searched_twice
    assert not first_record["final_calibration_detail"]["calibration_cached"]
    assert [trial["calibration_cached"] for trial in record["trials_detail"]] == [True]
    assert record["final_calibration_detail"]["calibration_cached"]
    assert again.metrics["calibration_samples"] == first.metrics["calibration_samples"]
    assert (root / "again" / "model.pdiparams").read_bytes() == (root / "first" / "model.pdiparams").read_bytes()


def test_a_trial_setting_no_smaller_than_the_full_set_adds_no_final_calibration(stage_dirs, tmp_path):
    full = full_set_samples(stage_dirs)
    result, record = search(stage_dirs, tmp_path / "out", trial_calibration_samples=full)
    assert [trial["calibration_samples"] for trial in record["trials_detail"]] == [full]
    assert record["final_calibration_detail"] is None and result.metrics["search"]["final_calibration"] is None
    assert result.metrics["calibration_samples"] == full


def test_a_full_set_model_that_misses_the_policy_is_not_written(stage_dirs, tmp_path, monkeypatch):
    final_trial = TrialRunner.final_trial

    def missing(runner, kept):  # the real full-set calibration, judged as if it missed the policy
        trial = final_trial(runner, kept)
        return dataclasses.replace(trial, passed=False, failures=["agreement 0.5 < 0.9 (forced by the test)"])

    monkeypatch.setattr(TrialRunner, "final_trial", missing)
    result, record = search(stage_dirs, tmp_path / "out")
    final = record["final_calibration_detail"]
    assert final["calibration_samples"] == full_set_samples(stage_dirs) and not final["passed"]
    assert not final["written"] and "MISSES the policy" in final["note"] and "forced by the test" in final["note"]
    # The subset model, which passed, is written, and the manifest describes it.
    assert result.metrics["search"]["passed"] and result.metrics["calibration_samples"] == TRIAL_SAMPLES
    assert result.metrics["search"]["validation"] == record["trials_detail"][0]["validation"]
