"""Equalizing a depthwise conv's input on an FP32 ONNX graph (what a PIR model's calibration gets, PaddleSlim's
equalization being a Paddle program rewrite): PP-LCNetV3's stem (conv -> BatchNorm -> depthwise conv), built as an
ONNX graph, calibrated by quantgate on the graph and run in onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantgate.int8 import onnx_equalization
from quantgate.int8.onnx_equalization import MAX_GAIN
from quantgate.int8.paddle2onnx_qdq import fold_batch_norms
from quantgate.stages.quantize.onnx_calibration import calibrate_onnx_graph, lower_calibrated

HIST = type("Recipe", (), {"algo": "hist", "hist_percent": 0.9999, "weight_quantize_type": "channel_wise_abs_max"})
GAMMA = np.geomspace(0.02, 4.0, 8).astype(np.float32)  # channels as far apart as the recognizer's stem


def stem(path, activated: bool = False) -> None:
    """conv -> BatchNorm [-> ReLU] -> depthwise conv -> ReLU -> global pool; the depthwise filters undo GAMMA, as a
    trained recognizer's do."""
    rng = np.random.default_rng(0)
    conv = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    depthwise = (rng.normal(0, 0.3, (8, 1, 3, 3)) / GAMMA.reshape(-1, 1, 1, 1)).astype(np.float32)
    initializers = [numpy_helper.from_array(value, name) for name, value in (
        ("conv.w", conv), ("conv.b", np.zeros(8, np.float32)), ("bn.scale", GAMMA),
        ("bn.bias", GAMMA * np.linspace(-1, 1, 8).astype(np.float32)), ("bn.mean", np.zeros(8, np.float32)),
        ("bn.var", np.ones(8, np.float32)), ("dw.w", depthwise), ("dw.b", np.zeros(8, np.float32)))]
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["n"],
                              name="bn")]
    if activated:
        nodes.append(helper.make_node("Relu", ["n"], ["r"], name="relu"))
    nodes += [helper.make_node("Conv", ["r" if activated else "n", "dw.w", "dw.b"], ["d"], group=8,
                               pads=[1, 1, 1, 1], name="dw"),
              helper.make_node("Relu", ["d"], ["a"], name="act"),
              helper.make_node("GlobalAveragePool", ["a"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8, 1, 1])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def images(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (32, 3, 16, 16)).astype(np.float32)


def batches():
    calibration = images(1)
    return lambda: (calibration[start:start + 8] for start in range(0, 32, 8))


def run(path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_the_rewrite_keeps_the_function_and_brings_the_channels_to_one_range(tmp_path):
    stem(tmp_path / "fp32.onnx")
    model = onnx.load(str(tmp_path / "fp32.onnx"))
    fold_batch_norms(model)
    ((conv, depthwise),) = onnx_equalization.depthwise_pairs(model)
    assert (conv.name, depthwise.name) == ("conv", "dw")
    before = run(tmp_path / "fp32.onnx", images(2))
    ranges = np.abs(np.concatenate([ort.InferenceSession(_with_output(model, conv.output[0]),
                                                         providers=["CPUExecutionProvider"]).run(
        [conv.output[0]], {"x": x})[0] for x in batches()()])).max(axis=(0, 2, 3))
    (record,) = onnx_equalization.equalize(model, {conv.output[0]: ranges})
    assert record["range_ratio_before"] > 100
    assert record["range_ratio_after"] == pytest.approx(record["range_ratio_before"] / MAX_GAIN, rel=0.01)
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": images(2)})[0]
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-5)


def _with_output(model: onnx.ModelProto, name: str) -> bytes:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.append(onnx.ValueInfoProto(name=name))
    return copy.SerializeToString()


def test_calibrating_the_equalized_graph_brings_int8_closer_to_fp32(tmp_path):
    stem(tmp_path / "fp32.onnx")
    reference, errors = run(tmp_path / "fp32.onnx", images(3)), {}
    for equalize in (False, True):
        calibration = calibrate_onnx_graph(tmp_path / "fp32.onnx", batches(), HIST, (), tmp_path / f"raw{equalize}.onnx",
                                           histogram="one_pass", equalize=equalize)
        assert bool(calibration.metrics["equalized_tensors"]) is equalize
        lower_calibrated(calibration, tmp_path / f"int8{equalize}.onnx")
        errors[equalize] = float(np.abs(run(tmp_path / f"int8{equalize}.onnx", images(3)) - reference).mean()
                                 / np.abs(reference).mean())
    assert errors[True] < errors[False] / 2, errors


def test_an_activation_between_the_convs_is_left_alone(tmp_path):
    stem(tmp_path / "fp32.onnx", activated=True)
    calibration = calibrate_onnx_graph(tmp_path / "fp32.onnx", batches(), HIST, (), tmp_path / "raw.onnx",
                                       histogram="one_pass", equalize=True)
    assert calibration.metrics["equalized_tensors"] == []  # ReLU does not commute with a per-channel scale


def test_a_calibration_from_measured_statistics_reuses_their_channel_ranges(tmp_path):
    """A fall-back's estimate recalibrates from the base's statistics with no forward pass: the equalization's
    ranges come with them, so the batches are not read again."""
    stem(tmp_path / "fp32.onnx")
    base = calibrate_onnx_graph(tmp_path / "fp32.onnx", batches(), HIST, (), tmp_path / "base.onnx",
                                histogram="one_pass", equalize=True)

    def unread():
        raise AssertionError("the calibration batches were read again")

    again = calibrate_onnx_graph(tmp_path / "fp32.onnx", unread, HIST, (), tmp_path / "again.onnx",
                                 histogram="one_pass", statistics=base.statistics, equalize=True)
    assert again.metrics["equalized_tensors"] == base.metrics["equalized_tensors"] != []
    assert again.metrics["calibration_statistics_reused"]
