"""Calibration on the FP32 ONNX graph (what a PIR model gets) against PaddleSlim on the same tiny real networks.

Each network is saved by Paddle, calibrated by PaddleSlim and converted by paddle2onnx 1.3.1 (`pattern_nets`);
quantgate calibrates paddle2onnx's FP32 graph of it on the same seeded batches. The thresholds, the raw graph's
Q/DQ pattern and what the lowering makes of it must be PaddleSlim's.
"""

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.pattern_nets import SHAPE, inputs, pattern_models

from quantgate.int8.lower_int8 import lower_int8
from quantgate.int8.paddle2onnx_qdq import constants_as_initializers
from quantgate.int8.paddle_quantization import paddle_program_scales, read_paddle_quantization
from quantgate.memory import MemoryBudget, MemoryRefused
from quantgate.stages.quantize.onnx_calibration import (
    CALIBRATED_BY,
    calibrate_onnx_graph,
    lower_calibrated,
)
from quantgate.stages.quantize.pir_seam import ONNX_GRAPH_BATCH, calibration_bytes, onnx_graph_batch

BATCH, BATCHES = 16, 4  # pattern_model's PaddleSlim calibration: inputs(64, seed + 1) in 4 batches of 16
HIST = SimpleNamespace(algo="hist", hist_percent=0.9999, weight_quantize_type="channel_wise_abs_max")  # its recipe
COUNTS = ("paddle_quantized_nodes", "folded_activations", "paddle_activation_scales", "paddle_weight_scales",
          "per_channel_weights", "float_nodes_with_quantized_inputs", "float_layers", "derived_activation_scales",
          "absorbed_affines", "integer_hardswish", "ops", "quantize_linear", "dequantize_linear")


def batches(seed: int = 0):
    calibration = inputs(BATCH * BATCHES, seed + 1)
    return lambda: (calibration[start:start + BATCH] for start in range(0, len(calibration), BATCH))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return pattern_models(tmp_path_factory)


def paddleslim_scales(model_dir: Path, out_dir: Path, algo: str) -> dict:
    """PaddleSlim's program scales for `algo` on pattern_model's calibration batches."""
    import paddle
    from paddleslim.quant import quant_post_static

    from quantgate.int8.static_graph import static_mode

    feed = batches()
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            quant_post_static(
                executor=paddle.static.Executor(paddle.CPUPlace()), model_dir=str(model_dir),
                quantize_model_path=str(out_dir), data_loader=lambda: ({"x": images} for images in feed()),
                model_filename="inference.pdmodel", params_filename="inference.pdiparams",
                save_model_filename="model.pdmodel", save_params_filename="model.pdiparams",
                batch_size=BATCH, batch_nums=BATCHES, scope=scope, algo=algo, onnx_format=True)
    return paddle_program_scales(out_dir / "model")


def test_abs_max_thresholds_are_paddleslims(models, tmp_path):
    model = models("se_block")
    theirs = paddleslim_scales(model.fp32_onnx.parent / "fp32", tmp_path / "paddleslim", "abs_max")
    recipe = SimpleNamespace(algo="abs_max", hist_percent=0.9999, weight_quantize_type="channel_wise_abs_max")
    calibration = calibrate_onnx_graph(model.fp32_onnx, batches(), recipe, (), tmp_path / "raw.onnx")
    ours = calibration.program_scales
    common = sorted(set(theirs) & set(ours))
    assert len(common) >= 15, common  # every conv's input, weight and output, the SE block's activations
    for name in common:
        np.testing.assert_allclose(ours[name][0], theirs[name][0], rtol=1e-5, err_msg=name)
        assert ours[name][1] == theirs[name][1], name  # per channel along the same axis, or per tensor
    assert calibration.metrics["calibrated_by"] == CALIBRATED_BY


@pytest.mark.parametrize("pattern", ["lab_residual", "se_block", "attention"])
def test_onnx_graph_calibration_lowers_as_paddleslims_model(models, tmp_path, pattern):
    """BatchNorm folded (lab_residual), SE block's Mul and ReLU (se_block), linear layers paddle2onnx drops and
    the lowering restores from the program (attention): the same Q/DQ, the same rewrites, scales within 1e-5."""
    model = models(pattern)
    calibration = calibrate_onnx_graph(model.fp32_onnx, batches(), HIST, (), tmp_path / "raw.onnx")
    ours = lower_calibrated(calibration, tmp_path / "ours.onnx").metrics
    theirs = lower_int8(model.raw_onnx, tmp_path / "theirs.onnx", paddle_model_prefix=model.paddle_prefix).metrics
    assert {key: ours[key] for key in COUNTS} == {key: theirs[key] for key in COUNTS}
    assert ours["calibrated_by"] == CALIBRATED_BY

    paddleslim = read_paddle_quantization(onnx.load(str(model.raw_onnx)), paddle_program_scales(model.paddle_prefix))
    onnx_graph = read_paddle_quantization(onnx.load(str(calibration.raw_onnx)), calibration.program_scales)
    assert set(onnx_graph.activation_scales) == set(paddleslim.activation_scales)
    for name, scale in paddleslim.activation_scales.items():
        assert onnx_graph.activation_scales[name] == pytest.approx(scale, rel=1e-5), name
    for name, (scales, axis) in paddleslim.weight_scales.items():
        np.testing.assert_allclose(onnx_graph.weight_scales[name][0], scales, rtol=1e-5, err_msg=name)


def test_a_skipped_layer_has_no_qdq_and_keeps_its_fp32_weight(models, tmp_path):
    model = models("lab_residual")
    fp32_graph = constants_as_initializers(onnx.load(str(model.fp32_onnx))).graph  # paddle2onnx: Constant nodes
    fp32_weight = next(init for init in fp32_graph.initializer if init.name == "conv2d_2.w_0")

    calibration = calibrate_onnx_graph(model.fp32_onnx, batches(), HIST, ("conv2d_2.w_0",), tmp_path / "raw.onnx")
    assert "conv2d_2.w_0" not in calibration.layers and len(calibration.layers) == 2
    raw = onnx.load(str(calibration.raw_onnx)).graph
    quantized = {node.input[0] for node in raw.node if node.op_type == "QuantizeLinear"}
    assert "conv2d_2.w_0" not in quantized and "Add.11" not in quantized  # neither its weight nor its input

    lowered = lower_calibrated(calibration, tmp_path / "int8.onnx")
    graph = onnx.load(str(tmp_path / "int8.onnx")).graph
    conv = next(node for node in graph.node if node.op_type == "Conv" and node.input[1] == "conv2d_2.w_0")
    weight = next(init for init in graph.initializer if init.name == conv.input[1])
    assert weight.data_type == onnx.TensorProto.FLOAT
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(weight), onnx.numpy_helper.to_array(fp32_weight))
    assert lowered.metrics["paddle_weight_scales"] == 2


def test_an_unsupported_recipe_or_skip_name_is_refused_naming_it(models, tmp_path):
    model = models("se_block")
    bad = SimpleNamespace(algo="min_max", hist_percent=0.9999, weight_quantize_type="channel_wise_abs_max",
                          bias_correction=True)
    with pytest.raises(ValueError, match=r"min_max.*bias_correction.*no_such\.w_0"):
        calibrate_onnx_graph(model.fp32_onnx, batches(), bad, ("no_such.w_0",), tmp_path / "raw.onnx")
    assert not (tmp_path / "raw.onnx").exists()


def test_the_calibration_batch_on_the_onnx_graph_is_fitted_to_the_memory_budget(models, tmp_path, monkeypatch):
    """A batch's measured tensors are all held at once: the batch is what the budget allows, and one sample that
    does not fit is refused before anything runs (it was quantize.batch_size or 32, whatever the budget)."""
    resident = 2**30  # this process's memory, held still: a tiny net's samples are smaller than its jitter
    monkeypatch.setattr("quantgate.stages.quantize.pir_seam.tree_memory_bytes", lambda: resident)
    export = tmp_path / "export"
    export.mkdir()
    (export / "fp32.onnx").write_bytes(models("se_block").fp32_onnx.read_bytes())
    cost = calibration_bytes(export / "fp32.onnx", SHAPE)
    # probed in child processes: the sample itself, and what measuring it holds (pages: VmHWM)
    assert cost.per_sample >= 4 * int(np.prod(SHAPE)) and cost.fixed >= 0  # a tiny net's own share may read 0
    config = SimpleNamespace(batch_size=None)
    roomy = MemoryBudget(resident + 2**33, "test: plenty")
    assert onnx_graph_batch(config, export, SHAPE, roomy).batch_size == ONNX_GRAPH_BATCH
    five = MemoryBudget(resident + cost.fixed + int(5.5 * cost.per_sample), "test: five samples")
    chosen = onnx_graph_batch(SimpleNamespace(batch_size=16), export, SHAPE, five)
    assert chosen.batch_size == 5 and "probed at batches 1 and 2" in chosen.record()["measured_by"]
    with pytest.raises(MemoryRefused, match="quantize.batch_size|one sample"):
        onnx_graph_batch(config, export, SHAPE, MemoryBudget(resident + cost.fixed, "test: too small"))
