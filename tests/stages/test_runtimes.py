"""The evaluate stage in every runtime it gates on: onnxruntime, OpenVINO and Paddle Inference (oneDNN), on the
digits CNN the session fixture trained, quantized and converted."""

import importlib.util

import numpy as np
import pytest

from quantgate.runtimes.forms import ModelForm, RuntimeUnavailable, check_runtimes, open_runner
from quantgate.runtimes.ort_forms import QGEMM_PATH
from quantgate.stages.data import open_data
from quantgate.stages.evaluate.accuracy import NoInt8Kernels, evaluate
from quantgate.stages.evaluate.outputs import OUTPUTS, PREDICTIONS_FILE, primary_runtime, runtime_predictions_file

OPENVINO_INSTALLED = importlib.util.find_spec("openvino") is not None  # CI installs it: pip install -e '.[openvino]'
RUNTIMES = ("onnxruntime", *(("openvino",) if OPENVINO_INSTALLED else ()), "paddle_inference")
needs_openvino = pytest.mark.skipif(not OPENVINO_INSTALLED, reason="openvino is not installed (pip install -e '.[openvino]')")
JUDGED = ("fp32_top1_pct", "int8_top1_pct", "accuracy_delta_pts", "agreement", "latency_ms_p50_fp32",
          "latency_ms_p50_int8", "speedup_int8_vs_fp32", "model_bytes_fp32", "model_bytes_int8")


def run_evaluate(stage_dirs, tiny_config, out_dir, runtimes, int8_onnx=None, paddle_int8_dir=None):
    config = tiny_config(evaluate={"runtimes": list(runtimes), "latency_repeats": 3}).evaluate
    return evaluate(config, stage_dirs.convert / "fp32.onnx", int8_onnx or stage_dirs.convert / "int8.onnx",
                    stage_dirs.data, out_dir, paddle2onnx_int8_onnx=stage_dirs.convert / "int8_paddle2onnx.onnx",
                    paddle_fp32_dir=stage_dirs.export, paddle_int8_dir=paddle_int8_dir or stage_dirs.quantize)


@pytest.fixture(scope="module")
def every_runtime(stage_dirs, tiny_config, tmp_path_factory):
    """The evaluate stage run once more on the session's folders, with every runtime listed."""
    out_dir = tmp_path_factory.mktemp("evaluate_runtimes")
    return out_dir, run_evaluate(stage_dirs, tiny_config, out_dir, RUNTIMES).metrics


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_each_runtime_measures_fp32_and_int8_accuracy_latency_and_size(every_runtime, stage_dirs, runtime):
    out_dir, metrics = every_runtime
    entry = metrics["runtimes"][runtime]
    with np.load(out_dir / entry["predictions_file"]) as stored:
        labels, fp32, int8 = stored["labels"], stored["fp32_pred"], stored["int8_pred"]
        assert np.array_equal(stored["int8_logits"].argmax(axis=1), int8)
    assert np.array_equal(labels, open_data(stage_dirs.data).labels("test"))  # every image, the padded batch's too
    assert entry["fp32_top1_pct"] == 100.0 * np.mean(fp32 == labels) > 85.0
    assert entry["int8_top1_pct"] == 100.0 * np.mean(int8 == labels)
    assert entry["agreement"] == np.mean(fp32 == int8) >= 0.95
    assert entry["accuracy_delta_pts"] == entry["int8_top1_pct"] - entry["fp32_top1_pct"]
    for model in ("fp32", "int8"):
        assert 0 < entry[f"latency_ms_p10_{model}"] <= entry[f"latency_ms_p50_{model}"] <= entry[f"latency_ms_p90_{model}"]
    assert entry["speedup_int8_vs_fp32"] == entry["latency_ms_p50_fp32"] / entry["latency_ms_p50_int8"]
    assert 0 < entry["model_bytes_int8"] < entry["model_bytes_fp32"]
    assert entry["library"].startswith(runtime.split("_")[0])


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_each_runtime_also_times_fp32_and_int8_at_batch_1_the_same_way(every_runtime, runtime):
    entry = every_runtime[1]["runtimes"][runtime]
    for model in ("fp32", "int8"):
        stats = [entry[f"latency_ms_{stat}_{model}_batch1"] for stat in ("p10", "p50", "p90")]
        assert 0 < stats[0] <= stats[1] <= stats[2]
        assert entry[f"latency_ms_runs_{model}_batch1"] == entry[f"latency_ms_runs_{model}"]
    assert entry["speedup_int8_vs_fp32_batch1"] == entry["latency_ms_p50_fp32_batch1"] / entry["latency_ms_p50_int8_batch1"]


def test_each_listed_runtime_has_its_own_predictions_file(every_runtime):
    out_dir, metrics = every_runtime
    files = {runtime: entry["predictions_file"] for runtime, entry in metrics["runtimes"].items()}
    assert files == {runtime: runtime_predictions_file(runtime, "onnxruntime") for runtime in RUNTIMES}
    assert files["onnxruntime"] == PREDICTIONS_FILE and files["paddle_inference"] == "predictions_paddle_inference.npz"
    # on an AMX CPU the GEMM form of the INT8 model is timed too, and kept only where it was the faster one
    kept = ["int8_qgemm.onnx"] if metrics["runtimes"]["onnxruntime"]["ort_int8_path"] == QGEMM_PATH else []
    assert sorted(path.name for path in out_dir.iterdir()) == sorted([*files.values(), *kept])
    assert set(files.values()) <= {*OUTPUTS.files, *OUTPUTS.optional_files}


def test_the_top_level_metrics_are_onnxruntimes_when_it_is_listed(every_runtime):
    _, metrics = every_runtime
    assert metrics["primary_runtime"] == "onnxruntime"
    assert {key: metrics[key] for key in JUDGED} == {key: metrics["runtimes"]["onnxruntime"][key] for key in JUDGED}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_each_runtime_runs_every_convolution_and_matmul_of_the_int8_model_in_int8(every_runtime, runtime):
    ops = every_runtime[1]["runtimes"][runtime]["int8_ops"]
    assert ops["int8"] == ops["total_conv_matmul"] == 4  # the digits CNN: three convolutions and a linear layer


def test_paddle_inference_records_what_its_int8_passes_left_around_the_int8_kernels(every_runtime):
    ops = every_runtime[1]["runtimes"]["paddle_inference"]["int8_ops"]
    # float images in, float logits out: oneDNN quantizes the first input and dequantizes before the output
    assert ops["conversions"].get("quantize", 0) >= 1 and ops["conversions"].get("dequantize", 0) >= 1
    # the digits CNN's three BatchNorms stay in float in oneDNN's INT8 program (measured with Paddle 3.3.1);
    # nothing that is counted as a convolution/matmul is counted again
    assert ops["float_compute"] == {"batch_norm": 3}


def test_onnxruntime_records_the_int8_kernel_path_it_took_on_this_cpu(every_runtime):
    _, metrics = every_runtime
    entry = metrics["runtimes"]["onnxruntime"]
    if not metrics["cpu"]["amx"]:
        assert entry["ort_int8_path"] == "ConvSym (QLinearConv)"
        assert entry["int8_ops"]["int8_kernels"] == {"QLinearConv": 3, "MatMulIntegerToFloat": 1}
    else:  # the faster of the two forms, both timed
        assert entry["ort_int8_path"] == min(entry["ort_int8_paths_ms_p50"], key=entry["ort_int8_paths_ms_p50"].get)


@needs_openvino
def test_openvino_runs_fp32_models_in_f32_not_bf16(every_runtime, stage_dirs):
    assert every_runtime[1]["runtimes"]["openvino"]["inference_precision"] == {"fp32": "f32", "int8": "f32"}
    runner = open_runner("openvino", ModelForm(stage_dirs.convert / "fp32.onnx", False, "fp32", "convert"), 1, (4, 1, 8, 8))
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"
    # On CPUs with AVX512-BF16 or AMX the plugin would pick bf16 without the hint; every layer must run f32.
    assert runner.int8_ops()["runtime_precision"] == {"Convolution f32": 3, "FullyConnected f32": 1}


@needs_openvino
def test_openvino_pads_a_partial_batch_to_its_static_shape_and_drops_the_padding(stage_dirs):
    images = open_data(stage_dirs.data).array("test", limit=11)[0]
    int8 = ModelForm(stage_dirs.convert / "int8.onnx", True, "int8", "convert")
    compiled_for_4 = open_runner("openvino", int8, 1, (4, 1, 8, 8))
    compiled_for_11 = open_runner("openvino", int8, 1, (11, 1, 8, 8))
    logits = compiled_for_4(images)  # 4 + 4 + 3 padded to 4
    assert logits.shape == (11, 10)
    np.testing.assert_allclose(logits, compiled_for_11(images), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_int8_model_that_runs_nothing_in_int8_fails_the_stage(stage_dirs, tiny_config, tmp_path, runtime):
    # The FP32 model handed over as the INT8 one: the runtime must say so instead of gating FP32 numbers.
    with pytest.raises(NoInt8Kernels, match=rf"^{runtime} runs none of the 4 convolutions/matmuls"):
        run_evaluate(stage_dirs, tiny_config, tmp_path, (runtime,), int8_onnx=stage_dirs.convert / "fp32.onnx",
                     paddle_int8_dir=stage_dirs.export)


def test_paddle_inference_without_the_paddle_model_folders_is_refused(stage_dirs, tiny_config, tmp_path):
    config = tiny_config(evaluate={"runtimes": ["paddle_inference"]}).evaluate
    with pytest.raises(RuntimeUnavailable, match="paddle_fp32_dir, paddle_int8_dir"):
        evaluate(config, stage_dirs.convert / "fp32.onnx", stage_dirs.convert / "int8.onnx", stage_dirs.data, tmp_path)


def test_an_unknown_runtime_is_refused_with_the_known_ones():
    with pytest.raises(RuntimeUnavailable, match="'tensorrt' is not a runtime .*onnxruntime, openvino, paddle_inference"):
        check_runtimes(("onnxruntime", "tensorrt"))


def test_the_primary_runtime_is_onnxruntime_when_listed_else_the_first_listed():
    assert primary_runtime(("openvino", "onnxruntime")) == "onnxruntime"
    assert primary_runtime(("paddle_inference", "openvino")) == "paddle_inference"
    assert runtime_predictions_file("openvino", "openvino") == PREDICTIONS_FILE
    assert runtime_predictions_file("openvino", "paddle_inference") == "predictions_openvino.npz"
