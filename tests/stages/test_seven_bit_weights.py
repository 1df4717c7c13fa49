"""7-bit weights rounded once from FP32 (quantize stage, `weight_bits=7`), not by halving PaddleSlim's 8-bit codes:
on a tiny real network (conv -> BatchNorm -> depthwise conv -> HardSwish -> 1x1 conv -> linear), through PaddleSlim,
paddle2onnx and the lowering."""

import numpy as np
import onnxruntime as ort
import pytest

from quantgate.config import QuantizeConfig
from quantgate.int8.paddle_quantization import _seven_bit_grid_step
from quantgate.int8.static_graph import load_program, static_mode
from quantgate.int8.weight_range import WeightBits
from quantgate.samples.reading import open_data
from quantgate.stages.convert.onnx_export import convert
from quantgate.stages.convert.outputs import INT8_FILE
from quantgate.stages.quantize import quantize
from quantgate.stages.quantize.quantized_weights import quantized_layers, weight_arrays
from tests.stages.test_adaround import block  # noqa: F401  (the module's fixture: the tiny network)

SINGLE = QuantizeConfig(strategy="single", batch_size=8)


@pytest.fixture(scope="module")
def quantized(block):  # noqa: F811
    """The network quantized twice from the same calibration: 8-bit weights and 7-bit ones."""
    results = {}
    for bits in (8, 7):
        out = block / f"w{bits}"
        out.mkdir()
        results[bits] = quantize(SINGLE, block / "block", "model.pdmodel", "model.pdiparams", block / "data", out,
                                 weight_bits=bits)
    return block, results


def weights(root, bits):
    """Per quantized layer: (8-bit-grid codes, FP32 weight, step, depthwise) of the `w{bits}` model."""
    with static_mode():
        int8, fp32 = load_program(root / f"w{bits}" / "model"), load_program(root / "block" / "model")
        layers, _ = quantized_layers(int8, fp32)
        return {layer.codes: (*weight_arrays(int8, fp32, layer), layer.depthwise) for layer in layers}


def test_7_bit_weights_are_the_fp32_weights_rounded_once_to_every_other_point_of_the_8_bit_grid(quantized):
    root, results = quantized
    seven, eight = weights(root, 7), weights(root, 8)
    record = results[7].metrics
    assert record["weight_bits"] == 7 and results[8].metrics["weight_bits"] == 8
    assert results[8].metrics["weights_rounded_from_fp32"] == []
    # The stem conv, the 1x1 conv and the linear head; the depthwise conv keeps 8 bits, as the lowering keeps it.
    assert sorted(record["weights_rounded_from_fp32"]) == sorted(n for n, w in seven.items() if not w[3])
    assert len(record["weights_rounded_from_fp32"]) == 3 and record["weights_left_as_paddleslim_rounded"] == {}
    squared_error = {"once": 0.0, "halved": 0.0}
    for name, (codes, weight, step, depthwise) in seven.items():
        eight_codes, _, eight_step, _ = eight[name]
        np.testing.assert_array_equal(step, eight_step)  # the same grid: PaddleSlim's scale, untouched
        if depthwise:
            np.testing.assert_array_equal(codes, eight_codes)
            continue
        assert np.all(codes % 2 == 0) and codes.min() >= -128 and codes.max() <= 126
        np.testing.assert_array_equal(codes, 2 * np.clip(np.round(weight / (2 * step)), -64, 63))
        halved = 2 * np.clip(np.round(eight_codes / 2), -64, 63)  # what lowering 8-bit codes to 7 bits gives
        squared_error["once"] += float(np.sum((codes * step - weight) ** 2))
        squared_error["halved"] += float(np.sum((halved * step - weight) ** 2))
    # Rounding twice moved weights away from FP32 that rounding once keeps closer.
    assert squared_error["once"] < 0.8 * squared_error["halved"], squared_error


def outputs(onnx_file, images):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # each Q/DQ pair exactly
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def test_the_lowering_to_7_bits_changes_no_weight_that_the_quantize_stage_put_on_the_7_bit_grid(quantized, tmp_path):
    root, _ = quantized
    images, _ = open_data(root / "data").array("test")
    lowered = {}
    for source in (7, 8):
        for bits in (7, 8):
            out = tmp_path / f"w{source}-lowered{bits}"
            out.mkdir()
            metrics = convert(root / "block", root / f"w{source}", "model.pdmodel", "model.pdiparams", out,
                              WeightBits(bits, "test")).metrics
            assert metrics["int8"]["weight_bits"] == bits
            lowered[source, bits] = outputs(out / INT8_FILE, images)
    # Halving even codes is exact: the 7-bit-grid model computes the same lowered to 7 bits as to 8.
    np.testing.assert_allclose(lowered[7, 7], lowered[7, 8], rtol=1e-5, atol=1e-5)
    # Halving PaddleSlim's 8-bit codes is not (the old way to 7 bits).
    assert np.abs(lowered[8, 7] - lowered[8, 8]).max() > 1e-3


def test_the_lowering_recovers_the_step_of_a_folded_7_bit_weight_even_with_an_all_zero_channel():
    rng = np.random.default_rng(0)
    codes = 2 * rng.integers(-60, 61, (4, 3, 3, 3)).astype(np.float32)  # even codes: the 7-bit grid
    codes[0, 0, 0, 0], codes[1, 0, 0, 0], codes[3, 0, 0, 0], codes[2] = 126, -128, 126, 0  # channel 2 pruned
    step = np.array([0.01, 0.02, 0.0, 0.005], np.float32)  # PaddleSlim's step x the folded BatchNorm's gain
    weight = (codes * step.reshape(-1, 1, 1, 1)).astype(np.float32)
    absmax_step = (np.abs(weight).reshape(4, -1).max(axis=1) / 127).astype(np.float32)  # what paddle2onnx writes
    recovered = _seven_bit_grid_step(weight, absmax_step, 0)
    np.testing.assert_allclose(recovered[[0, 1, 3]], step[[0, 1, 3]], rtol=1e-6)
    assert recovered[2] == 0
    # A weight already on its step (no fold, or 8-bit codes), and one on no candidate's grid, keep their scale.
    np.testing.assert_array_equal(_seven_bit_grid_step(weight, step, 0), step)
    odd = weight + 0.3 * step.reshape(-1, 1, 1, 1)
    np.testing.assert_array_equal(_seven_bit_grid_step(odd, absmax_step, 0), absmax_step)
