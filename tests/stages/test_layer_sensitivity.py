"""The FP32 fall-back estimate is the model a real PaddleSlim skip produces, without running PaddleSlim."""

import numpy as np
import onnxruntime as ort
import pytest

from quantgate.config import QuantizeConfig
from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.paddle_quantization import quantized_layers
from quantgate.stages.data import open_data
from quantgate.stages.quantize.layer_sensitivity import FallbackEstimator, float_weights, lowered_model
from quantgate.stages.quantize.ptq import quantize_with_data
from quantgate.stages.quantize.validation_check import ValidationCheck


def logits(onnx_file, images):
    model = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return model.run(None, {model.get_inputs()[0].name: images})[0]


@pytest.fixture(scope="module")
def calibrations(stage_dirs, tmp_path_factory):
    """PaddleSlim on the tiny pipeline's model: nothing skipped, every layer skipped, the logits layer skipped."""
    root = tmp_path_factory.mktemp("sensitivity")
    data = open_data(stage_dirs.data)

    def calibrate(name, skip):
        (root / name).mkdir()
        quantize_with_data(QuantizeConfig(strategy="single", skip_tensors=skip), stage_dirs.export, "model.pdmodel",
                           "model.pdiparams", data, root / name, allow_float=True)
        return root / name

    base = calibrate("base", ())
    raw = lowered_model(base, root / "base.onnx")
    layers = quantized_layers(raw, base / "model")
    return root, base, raw, layers, calibrate("all-float", tuple(layers)), calibrate("logits-float", layers[-1:])


def test_the_estimate_of_a_fall_back_predicts_what_the_real_paddleslim_skip_does(calibrations, stage_dirs):
    root, base, raw, layers, all_float, logits_float = calibrations
    data = open_data(stage_dirs.data)
    check = ValidationCheck(stage_dirs.convert / "fp32.onnx", data, 2, 64)
    estimator = FallbackEstimator(raw, base, float_weights(all_float), check, layers)
    assert layers[-1] in estimator.float_weights  # the logits layer's fall-back can be assembled
    estimate = estimator.model([layers[-1]], root / "estimate.onnx")
    lowered_model(logits_float, root / "real.onnx")
    images = data.array("test")[0]
    estimated, real, quantized = (logits(path, images) for path in (estimate, root / "real.onnx", root / "base.onnx"))
    assert np.abs(estimated - real).max() <= 1e-4 * np.abs(real).max()  # the same model, to float rounding
    assert np.abs(estimated - quantized).max() > 1e-3 * np.abs(real).max()  # and not the quantized one
    assert check.score(estimate) == check.score(root / "real.onnx")


def test_the_estimate_is_lowered_with_the_weight_bits_the_trials_use(calibrations, stage_dirs):
    # on a CPU without VNNI/AMX the trials, and so the estimates they are compared with, keep 7-bit weights
    root, base, raw, layers, all_float, logits_float = calibrations
    data = open_data(stage_dirs.data)
    estimator = FallbackEstimator(raw, base, float_weights(all_float), None, layers, Lowering(weight_bits=7))
    estimate = estimator.model([layers[-1]], root / "estimate7.onnx")
    lowered_model(logits_float, root / "real7.onnx", Lowering(weight_bits=7))
    lowered_model(logits_float, root / "real8.onnx")
    images = data.array("test")[0]
    estimated, real7, real8 = (logits(path, images) for path in (estimate, root / "real7.onnx", root / "real8.onnx"))
    assert np.abs(estimated - real7).max() <= 1e-4 * np.abs(real7).max()
    assert np.abs(estimated - real8).max() > 1e-3 * np.abs(real8).max()


def test_a_weight_that_is_not_a_rounding_of_the_float_one_is_not_estimated(calibrations, stage_dirs):
    """A float weight only qualifies if the INT8 weight is its rounding; here every candidate is swapped
    for another layer's, so none qualifies and the search measures such layers with real PaddleSlim runs."""
    root, base, raw, layers, all_float, _ = calibrations
    candidates = float_weights(all_float)
    shuffled = {layer: candidates[layers[(index + 1) % len(layers)]] for index, layer in enumerate(layers)}
    estimator = FallbackEstimator(raw, base, shuffled, None, layers)
    assert estimator.float_weights == {}
    with pytest.raises(ValueError, match="not estimable"):
        estimator.model(layers[:1], root / "never.onnx")
