import numpy as np
import pytest

from quantgate.errors import StageError
from quantgate.runtimes.forms import ModelForm
from quantgate.runtimes.latency import measure, measure_batch_sizes, measure_forms
from quantgate.runtimes.ort_forms import QGEMM_PATH
from quantgate.stages.data import open_data
from quantgate.stages.evaluate.outputs import OUTPUTS


def test_metrics_are_consistent_with_the_stored_predictions(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    with np.load(stage_dirs.evaluate / "predictions.npz") as stored:
        labels, fp32, int8 = stored["labels"], stored["fp32_pred"], stored["int8_pred"]
    assert np.array_equal(labels, open_data(stage_dirs.data).labels("test"))
    assert metrics["test_samples"] == len(labels) == 360
    assert metrics["fp32_top1_pct"] == 100.0 * np.mean(fp32 == labels)
    assert metrics["int8_top1_pct"] == 100.0 * np.mean(int8 == labels)
    assert metrics["accuracy_delta_pts"] == metrics["int8_top1_pct"] - metrics["fp32_top1_pct"]
    assert metrics["agreement"] == np.mean(fp32 == int8)
    assert metrics["fp32_top1_pct"] > 85.0  # three epochs on real digits
    assert len(metrics["per_class_top1_pct_int8"]) == 10


def test_latency_and_size_are_measured(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    for model in ("fp32", "int8"):
        assert 0 < metrics[f"latency_ms_p50_{model}"] <= metrics[f"latency_ms_p90_{model}"]
        assert metrics[f"model_bytes_{model}"] == (stage_dirs.convert / f"{model}.onnx").stat().st_size
    assert metrics["ort_threads"] == 2 and metrics["latency_batch_size"] == 16  # evaluate.latency_batch_size


def test_speedup_and_size_ratio_come_from_the_measured_latencies_and_files(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    assert metrics["speedup_int8_vs_fp32"] == metrics["latency_ms_p50_fp32"] / metrics["latency_ms_p50_int8"]
    assert metrics["size_ratio_int8_vs_fp32"] == metrics["model_bytes_int8"] / metrics["model_bytes_fp32"] < 1
    assert metrics["model_bytes_paddle2onnx_int8"] > metrics["model_bytes_int8"]
    for model in ("fp32", "int8", "paddle2onnx_int8"):
        assert metrics[f"latency_ms_p10_{model}"] <= metrics[f"latency_ms_p50_{model}"] <= metrics[f"latency_ms_p90_{model}"]


def test_a_latency_process_that_fails_is_a_stage_error_with_its_output(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(StageError, match=r"quantgate\.runtimes\.latency\) failed with exit 1(.|\n)*missing\.onnx"):
        measure({"fp32": missing}, np.zeros((1, 1, 8, 8), dtype=np.float32), threads=1, repeats=3)


def test_by_default_only_onnxruntime_is_evaluated_and_its_entry_repeats_the_top_level(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    assert metrics["primary_runtime"] == "onnxruntime" and list(metrics["runtimes"]) == ["onnxruntime"]
    entry = metrics["runtimes"]["onnxruntime"]
    for key in ("fp32_top1_pct", "int8_top1_pct", "agreement", "latency_ms_p50_int8", "speedup_int8_vs_fp32"):
        assert entry[key] == metrics[key]
    assert entry["predictions_file"] == stage_dirs.results["evaluate"].predictions_file == "predictions.npz"
    # on an AMX CPU the GEMM form of the INT8 model is timed too, and kept only where it was the faster one
    kept = ["int8_qgemm.onnx"] if entry["ort_int8_path"] == QGEMM_PATH else []
    assert sorted(path.name for path in stage_dirs.evaluate.iterdir()) == sorted(["predictions.npz", *kept])


def test_latency_is_also_measured_at_batch_1_with_the_same_repeats(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    entry = metrics["runtimes"]["onnxruntime"]
    for model in ("fp32", "int8", "paddle2onnx_int8"):
        p10, p50, p90 = (metrics[f"latency_ms_{stat}_{model}_batch1"] for stat in ("p10", "p50", "p90"))
        assert 0 < p10 <= p50 <= p90
        assert metrics[f"latency_ms_runs_{model}_batch1"] == metrics[f"latency_ms_runs_{model}"]  # the same policy
        assert entry[f"latency_ms_p50_{model}_batch1"] == p50
    assert metrics["speedup_int8_vs_fp32_batch1"] == \
        metrics["latency_ms_p50_fp32_batch1"] / metrics["latency_ms_p50_int8_batch1"]
    assert metrics["latency_batch_size"] == 16  # the other numbers' batch: evaluate.latency_batch_size
    assert {"latency_ms_p50_fp32_batch1", "latency_ms_p50_int8_batch1", "speedup_int8_vs_fp32_batch1"} <= \
        set(OUTPUTS.metrics)


def test_one_latency_process_times_each_batch_size_in_turn_and_batch_1_once(stage_dirs):
    batch = open_data(stage_dirs.data).array("test", limit=4)[0]
    timed = measure_batch_sizes({"fp32": stage_dirs.convert / "fp32.onnx"}, batch, (4, 1), threads=1, repeats=4)
    assert sorted(timed) == [1, 4] and all(stats["fp32"]["runs"] == 4 for stats in timed.values())
    # A batch of one image: its latency at "the evaluated batch" and at batch 1 are the same measurement.
    forms = {"fp32": ModelForm(stage_dirs.convert / "fp32.onnx", False, "fp32.onnx", "convert")}
    at_batch, at_batch1 = measure_forms("onnxruntime", forms, batch[:1], threads=1, repeats=2)
    assert at_batch is at_batch1 and at_batch["fp32"]["runs"] == 2
