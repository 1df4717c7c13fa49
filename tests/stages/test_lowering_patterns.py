"""Each pattern of PP-OCRv4's recognizer on a tiny real Paddle network: PaddleSlim -> paddle2onnx -> the lowering.

The lowered model must compute what the un-lowered one does, within quantization error, and onnxruntime
must run the integer kernels the lowering was written for.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.pattern_nets import pattern_models

from quantgate.int8.affine_absorption import absorb_scalar_affines
from quantgate.int8.lower_int8 import Lowering, lower_int8
from quantgate.int8.onnx_ops import runtime_op_counts
from quantgate.stages.convert.onnx_export import convert
from quantgate.stages.quantize.layer_sensitivity import lowered_model


def run(onnx_file: Path, inputs: np.ndarray) -> np.ndarray:
    """The model's outputs as a CPU with VNNI/AMX computes them: on AVX2 alone MLAS's u8 x s8 kernels saturate with
    8-bit weights, its u8 x u8 ones (session.x64quantprecision) do not; with VNNI/AMX the option changes nothing."""
    options = ort.SessionOptions()
    options.add_session_config_entry("session.x64quantprecision", "1")
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: inputs})[0]


def lowered(model, folder: Path, **switches) -> tuple[Path, dict]:
    out = folder / f"int8_{'_'.join(f'{k}{int(v)}' for k, v in sorted(switches.items())) or 'default'}.onnx"
    metrics = lower_int8(model.raw_onnx, out, paddle_model_prefix=model.paddle_prefix, **switches).metrics
    return out, metrics


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(ours - reference).max() / np.abs(reference).max())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return pattern_models(tmp_path_factory)


def test_learnable_affines_and_hardswish_run_on_integer_kernels(models, tmp_path):
    model = models("lab_hardswish")
    plain, _ = lowered(model, tmp_path, absorb_affines=False, hardswish_in_integers=False)
    ours, metrics = lowered(model, tmp_path)
    absorbed = metrics["absorbed_affines"]
    # both affines after a convolution go exactly into its bias and output grid; of those after HardSwish, the
    # one with b ~ 0 becomes the next grid, and so does the other (b = -0.2: a zero point 0.33 steps off an
    # integer), whose rounding the unpadded 1x1 conv reading it makes up in its int32 bias
    assert absorbed["into_convolution"] == 2 and absorbed["before_quantize"] == 2 and absorbed["after_dequantize"] == 0
    assert absorbed["rounding_into_next_bias"] == 1 and absorbed["kept"] == []
    assert absorbed["max_zero_point_shift_steps"] <= 0.05
    assert metrics["integer_hardswish"] == 2  # both HardSwishes, their output quantization now next to them
    before, after = runtime_op_counts(plain)["ops"], runtime_op_counts(ours)["ops"]
    assert before.get("HardSigmoid") == 2 and before.get("Mul", 0) >= 6  # HardSwish = x * HardSigmoid(x), affines
    assert not any(after.get(op) for op in ("HardSigmoid", "Mul", "Add"))  # no float element-wise op left
    assert after.get("QLinearAdd") == after.get("QLinearMul") == 2 and after.get("QLinearConv") == 3
    reference = run(model.raw_onnx, model.inputs)
    # the un-lowered model's arithmetic, within what one more rounding per rewritten tensor can move
    assert relative_error(run(ours, model.inputs), reference) <= 0.02
    assert relative_error(run(ours, model.inputs), run(model.fp32_onnx, model.inputs)) <= 0.05


def test_a_rounded_zero_point_read_by_a_padded_conv_is_kept_float(models, tmp_path):
    # a pad reads the zero point, which a bias correction would not reach: the affine stays a float op
    _, metrics = lowered(models("lab_padded"), tmp_path)
    absorbed = metrics["absorbed_affines"]
    assert absorbed["rounding_into_next_bias"] == 0 and absorbed["into_convolution"] == 1
    assert len(absorbed["kept"]) == 1 and "steps from an integer" in absorbed["kept"][0]
    assert metrics["integer_hardswish"] == 0


def test_with_hardswish_grids_an_affine_read_by_a_padded_conv_gets_a_grid_with_an_exact_zero_point(models, tmp_path):
    # y = a * hardswish(x) + b gets a grid of its own whose step divides b, so its zero point is exact and the
    # padded conv reads a true zero at its border
    model = models("lab_padded")
    ours, metrics = lowered(model, tmp_path, hardswish_grids=True)
    absorbed = metrics["absorbed_affines"]
    assert absorbed["rounding_into_next_bias"] == 0 and absorbed["into_convolution"] == 1
    assert absorbed["regridded"] == 1 and absorbed["kept"] == [] and absorbed["max_zero_point_shift_steps"] <= 0.05
    assert 0 < absorbed["max_regrid_step_ratio"] <= 1.05
    assert metrics["integer_hardswish"] == 1
    graph = onnx.load(str(ours)).graph
    constants = {init.name: onnx.numpy_helper.to_array(init) for init in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    padded = [node for node in graph.node if node.op_type == "Conv"  # the second conv; the first reads the image
              and any(attribute.name == "pads" and any(attribute.ints) for attribute in node.attribute)][1:]
    assert len(padded) == 1
    dequantize = producers[padded[0].input[0]]
    step, zero = (float(constants[name]) for name in dequantize.input[1:3])
    bias_scale = constants[producers[padded[0].input[2]].input[1]]
    weight_scale = constants[producers[padded[0].input[1]].input[1]]
    assert np.allclose(bias_scale / weight_scale, step, rtol=1e-6)  # the int32 bias moved with the input's grid
    ops = runtime_op_counts(ours)["ops"]
    assert ops.get("QLinearConv") == 2 and "HardSigmoid" not in ops and "Mul" not in ops
    assert 0 < zero < 128  # the codes below hardswish's least value went back to the range
    # the borders, where the padded conv reads the zero point, included
    assert relative_error(run(ours, model.inputs), run(model.raw_onnx, model.inputs)) <= 0.02


def test_squeeze_and_excitation_multiplies_in_integers(models, tmp_path):
    model = models("se_block")
    ours, metrics = lowered(model, tmp_path)
    ops = runtime_op_counts(ours)["ops"]
    assert ops.get("QLinearGlobalAveragePool", 0) >= 1 and ops.get("QLinearMul", 0) >= 1  # x * se
    assert ops.get("QLinearConv") == 5 and "Conv" not in ops
    assert metrics["integer_hardswish"] == 1  # the depthwise conv's HardSwish
    assert relative_error(run(ours, model.inputs), run(model.raw_onnx, model.inputs)) <= 0.05


@pytest.mark.parametrize("pattern", ["layernorm", "attention"])
def test_layernorm_and_attention_stay_float_between_one_dequantize_and_one_quantize(models, tmp_path, pattern):
    # onnxruntime has no integer LayerNorm, and SVTR's attention is a few percent of the recognizer's time
    # (docs/benchmarks.md): both run in float, entered once and left once, not through a Q/DQ per op.
    model = models(pattern)
    ours, _ = lowered(model, tmp_path)
    plain, _ = lowered(model, tmp_path, absorb_affines=False, hardswish_in_integers=False)
    graph = onnx.load(str(ours)).graph
    producers = {output: node for node in graph.node for output in node.output}
    float_ops = [node for node in graph.node if node.op_type in ("LayerNormalization", "Softmax", "ReduceMean")]
    assert float_ops, "the pattern's float ops are gone from the graph"
    for node in float_ops:
        source = producers.get(node.input[0])
        assert source is None or source.op_type != "QuantizeLinear"  # reads a float tensor, never int8 directly
    assert runtime_op_counts(ours)["integer_ops"] >= 1  # the convolution at least
    # The backbone rewrites leave these patterns alone. (The lowering quantizes the last linear layer, whose
    # Q/DQ paddle2onnx drops, from PaddleSlim's program: so FP32, not paddle2onnx's model, is the reference.)
    assert np.array_equal(run(ours, model.inputs), run(plain, model.inputs))
    assert relative_error(run(ours, model.inputs), run(model.fp32_onnx, model.inputs)) <= 0.2


def test_an_affine_with_a_negative_scale_is_kept_and_named(models, tmp_path):
    model = models("lab_hardswish")
    plain, _ = lowered(model, tmp_path, absorb_affines=False, hardswish_in_integers=False)
    quantized = onnx.load(str(plain))
    scales = [init for init in quantized.graph.initializer if init.name.endswith(".w_0") and len(init.float_data) +
              len(init.raw_data) // 4 == 1]
    assert scales, "the affine scales are not scalar initializers"
    for init in scales:  # a scale is positive: a negative affine cannot become a grid
        values = onnx.numpy_helper.to_array(init)
        init.CopyFrom(onnx.numpy_helper.from_array(-values, init.name))
    result = absorb_scalar_affines(quantized)
    assert result.into_convolution == result.after_dequantize == result.before_quantize == 0
    assert len(result.kept) == 4 and all("not positive" in reason for reason in result.kept)


def test_convert_hardswish_grids_reaches_the_convert_stage_and_the_search_trials(models, tmp_path):
    # convert.hardswish_grids: the convert stage and the lowering the search's trials judge both regrid
    model = models("lab_padded")
    int8_dir = model.paddle_prefix.parent
    fp32_dir = tmp_path / "fp32"
    fp32_dir.mkdir()
    for suffix in (".pdmodel", ".pdiparams"):  # export's file names are the quantize stage's
        shutil.copy(int8_dir.parent / "fp32" / f"inference{suffix}", fp32_dir / f"model{suffix}")
    converted = {}
    for grids in (False, True):
        (tmp_path / f"convert{grids}").mkdir()
        converted[grids] = convert(fp32_dir, int8_dir, "model.pdmodel", "model.pdiparams", tmp_path / f"convert{grids}",
                                   hardswish_grids=grids).metrics["int8"]
    assert converted[False]["absorbed_affines"]["regridded"] == 0 and converted[False]["hardswish_grids"] is False
    assert converted[True]["absorbed_affines"]["regridded"] == 1 and converted[True]["hardswish_grids"] is True
    trial = {}
    for grids in (False, True):
        lowered_model(int8_dir, tmp_path / f"trial{grids}.onnx", Lowering(hardswish_grids=grids))
        trial[grids] = onnx.load(str(tmp_path / f"trial{grids}.onnx"))
    convert_graph = onnx.load(str(tmp_path / "convertTrue" / "int8.onnx")).graph
    assert trial[True].graph == convert_graph  # the trial judges the very graph the convert stage writes
    assert trial[False].graph != trial[True].graph
