"""The lowered INT8 model: integer weights and kernels, PaddleSlim's scales, paddle2onnx's predictions."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from quantgate.config import QuantizeConfig
from quantgate.int8.errors import ConversionError
from quantgate.int8.integer_graph import describe
from quantgate.int8.lower_int8 import lower_int8
from quantgate.int8.onnx_ops import runtime_op_counts
from quantgate.int8.paddle_quantization import read_paddle_quantization
from quantgate.int8.weight_range import this_cpus_weight_bits
from quantgate.stages.convert.onnx_export import OP_CHECK_SAMPLES, convert
from quantgate.stages.data import open_data
from quantgate.stages.quantize.ptq import quantize


def run(onnx_file, images):
    model = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return model.run(None, {model.get_inputs()[0].name: images})[0]


def test_weights_are_int8_initializers_with_paddleslims_per_channel_scales(stage_dirs):
    lowered = onnx.load(str(stage_dirs.convert / "int8.onnx"))
    paddle = read_paddle_quantization(onnx.load(str(stage_dirs.convert / "int8_paddle2onnx.onnx")))
    initializers = {init.name: numpy_helper.to_array(init) for init in lowered.graph.initializer}
    weight_dqs = [node for node in lowered.graph.node
                  if node.op_type == "DequantizeLinear" and initializers.get(node.input[0]) is not None
                  and initializers[node.input[0]].dtype == np.int8 and initializers[node.input[0]].ndim == 4]
    assert len(weight_dqs) == 3  # every convolution's weights, stored as int8 (and the linear layer's, 2-D)
    for node in weight_dqs:
        weight = node.input[0].removesuffix("_quantized")
        paddle_scales, axis = paddle.weight_scales[weight]
        assert axis == 0 and paddle_scales.size == initializers[node.input[0]].shape[0] > 1  # per output channel
        assert np.array_equal(initializers[node.input[1]], paddle_scales)  # PaddleSlim's scales, bit for bit
    assert not any(values.dtype == np.float32 and values.ndim == 4 for values in initializers.values())


def test_onnxruntime_runs_every_quantized_convolution_as_an_integer_kernel(stage_dirs):
    metrics = stage_dirs.results["convert"].metrics
    lowered = metrics["int8"]["after_onnxruntime_optimization"]["ops"]
    assert lowered.get("QLinearConv") == metrics["fp32"]["ops"]["Conv"] == 3
    # paddle2onnx drops PaddleSlim's quantization of the linear layer; the lowering restores it from Paddle's program
    assert metrics["int8_paddle2onnx"]["after_onnxruntime_optimization"]["ops"].get("MatMul") == 1
    assert lowered.get("MatMulIntegerToFloat") == 1 and "MatMul" not in lowered  # logits stay float
    assert "Conv" not in lowered and "Relu" not in lowered  # ReLUs folded into the integer convolutions
    # no learnable affines or HardSwish in this CNN: the backbone rewrites find nothing and change nothing
    assert metrics["int8"]["absorbed_affines"] == {"into_convolution": 0, "after_dequantize": 0, "before_quantize": 0,
                                                   "rounding_into_next_bias": 0, "regridded": 0,
                                                   "max_zero_point_shift_steps": 0.0, "max_regrid_step_ratio": 0.0,
                                                   "kept": []}
    assert metrics["int8"]["integer_hardswish"] == 0
    assert runtime_op_counts(stage_dirs.convert / "int8.onnx")["ops"] == lowered
    assert metrics["int8"]["int8_initializers"] >= 2
    assert metrics["int8"]["bytes"] < metrics["int8_paddle2onnx"]["bytes"]
    assert metrics["int8"]["bytes"] == (stage_dirs.convert / "int8.onnx").stat().st_size


def test_lowered_model_predicts_like_paddle2onnx_int8_on_the_test_split(stage_dirs):
    metrics = stage_dirs.results["evaluate"].metrics
    assert metrics["agreement_int8_vs_paddle2onnx_int8"] >= 0.99
    assert abs(metrics["int8_top1_pct"] - metrics["paddle2onnx_int8_top1_pct"]) <= 0.5


def test_without_folding_the_lowering_reproduces_paddle2onnx_arithmetic(stage_dirs, tmp_path):
    images = open_data(stage_dirs.data).array("test")[0]
    metrics = lower_int8(stage_dirs.convert / "int8_paddle2onnx.onnx", tmp_path / "exact.onnx",
                         fold_activations=False).metrics
    assert metrics["folded_activations"] == 0
    exact, reference = run(tmp_path / "exact.onnx", images), run(stage_dirs.convert / "int8_paddle2onnx.onnx", images)
    # Same scales, uint8 = int8 + 128: integer kernels requantize with their own rounding, nothing more.
    assert np.array_equal(exact.argmax(axis=1), reference.argmax(axis=1))
    assert np.abs(exact - reference).max() <= 0.05 * np.abs(reference).max()


def test_a_layer_paddleslim_left_float_still_converts_and_runs(stage_dirs, tmp_path):
    fp32_graph = onnx.load(str(stage_dirs.convert / "fp32.onnx")).graph
    first_conv_weight = next(node.input[1] for node in fp32_graph.node if node.op_type == "Conv")
    (tmp_path / "quantize").mkdir()
    (tmp_path / "convert").mkdir()
    quantize(QuantizeConfig(batch_size=32, batch_nums=2, skip_tensors=(first_conv_weight,)), stage_dirs.export,
             "model.pdmodel", "model.pdiparams", stage_dirs.data, tmp_path / "quantize")
    result = convert(stage_dirs.export, tmp_path / "quantize", "model.pdmodel", "model.pdiparams", tmp_path / "convert")
    runtime = result.metrics["int8"]["after_onnxruntime_optimization"]["ops"]
    assert runtime.get("QLinearConv") == 2 and runtime.get("Conv", 0) + runtime.get("FusedConv", 0) == 1
    assert runtime.get("MatMulIntegerToFloat") == 1
    images = open_data(stage_dirs.data).array("test")[0]
    lowered, fp32 = run(tmp_path / "convert" / "int8.onnx", images), run(tmp_path / "convert" / "fp32.onnx", images)
    assert np.mean(lowered.argmax(axis=1) == fp32.argmax(axis=1)) >= 0.95


def test_a_model_without_paddleslim_quantization_is_refused_by_name(stage_dirs, tmp_path):
    with pytest.raises(ConversionError, match="fp32.onnx has no node PaddleSlim quantized"):
        lower_int8(stage_dirs.convert / "fp32.onnx", tmp_path / "lowered.onnx")
    assert not (tmp_path / "lowered.onnx").exists()


def test_an_inner_layer_paddleslim_left_float_is_fp32_in_onnxruntime(stage_dirs, tmp_path):
    """paddle2onnx may re-quantize a skipped layer's weight and input with scales of its own (it does in
    MobileNetV2); the lowering follows PaddleSlim's program instead: float weight, float input, float kernel."""
    fp32_graph = onnx.load(str(stage_dirs.convert / "fp32.onnx")).graph
    second_conv_weight = [node.input[1] for node in fp32_graph.node if node.op_type == "Conv"][1]
    (tmp_path / "quantize").mkdir()
    (tmp_path / "convert").mkdir()
    quantize(QuantizeConfig(batch_size=32, batch_nums=2, skip_tensors=(second_conv_weight,)), stage_dirs.export,
             "model.pdmodel", "model.pdiparams", stage_dirs.data, tmp_path / "quantize")
    result = convert(stage_dirs.export, tmp_path / "quantize", "model.pdmodel", "model.pdiparams", tmp_path / "convert")
    assert result.metrics["int8"]["float_layers"] == [second_conv_weight]
    lowered = onnx.load(str(tmp_path / "convert" / "int8.onnx")).graph
    producers = {output: node for node in lowered.node for output in node.output}
    float_conv = next(node for node in lowered.node if node.op_type == "Conv" and node.input[1] == second_conv_weight)
    weight = next(init for init in lowered.initializer if init.name == second_conv_weight)
    assert weight.data_type == onnx.TensorProto.FLOAT
    assert producers[float_conv.input[0]].op_type != "DequantizeLinear"  # reads the float tensor itself
    runtime = result.metrics["int8"]["after_onnxruntime_optimization"]["ops"]
    assert runtime.get("QLinearConv") == 1  # the third; the first now feeds only a float layer, so its output is float
    images = open_data(stage_dirs.data).array("test")[0]
    lowered_logits, fp32 = run(tmp_path / "convert" / "int8.onnx", images), run(tmp_path / "convert" / "fp32.onnx", images)
    assert np.mean(lowered_logits.argmax(axis=1) == fp32.argmax(axis=1)) >= 0.95


def test_the_convert_stage_describes_the_integer_graph_and_checks_each_integer_op_on_the_data(stage_dirs, tmp_path):
    (tmp_path / "convert").mkdir()
    weight_bits = this_cpus_weight_bits()  # as the flow lowers: 7 bits where onnxruntime's u8 x s8 sums saturate
    result = convert(stage_dirs.export, stage_dirs.quantize, "model.pdmodel", "model.pdiparams", tmp_path / "convert",
                     weight_bits, data_dir=stage_dirs.data)
    int8 = result.metrics["int8"]
    described = describe(onnx.load(str(tmp_path / "convert" / "int8.onnx"))).summary()
    assert int8["integer_graph"] == described and described["integer_ops_by_type"]["Conv"] == 3
    check = int8["op_check"]
    assert check["samples"] == OP_CHECK_SAMPLES and check["ops"] == described["integer_ops"]
    assert check["max_code_difference"] <= 1 and check["ops_off_by_more_than_one_code"] == []
    assert check["by_type"]["Conv"]["kernels"] == {"QLinearConv": 3}  # what onnxruntime ran, checked
    (tmp_path / "again").mkdir()
    without = convert(stage_dirs.export, stage_dirs.quantize, "model.pdmodel", "model.pdiparams", tmp_path / "again",
                      weight_bits)
    assert "op_check" not in without.metrics["int8"]  # no data: described only
