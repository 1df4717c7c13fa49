"""paddle2onnx 2.1.0's FP32 graph of a PIR program, normalised into 1.3.1's shapes (quantgate.int8.onnx_normalise):
no Identity, HardSwish rebuilt, conv biases in the Conv, the same outputs; and on the PP-OCRv4 recognizer translated
to PIR, the lowering makes the same rewrites of it as of 1.3.1's graph of the legacy folder.

The networks are real: saved by Paddle 3.3.1 with PIR on in a subprocess (FLAGS_enable_pir_api is read once, at
import) and converted by the paddle2onnx 2.1.0 quantgate installs (`quantgate.pir.children`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import REC_SHAPE, model_inputs, paddleocr_models, render_financial_lines
from support.pir_models import TRANSLATE_TO_PIR

from quantgate.int8.onnx_normalise import normalise, normalise_file
from quantgate.pir.children import ChildFailed, convert_to_onnx
from quantgate.pir.converter import find_converter

OPSET = 13  # what the convert stage asks of paddle2onnx 2.x (stages/convert/outputs.py)

# conv (bias) + BN + HardSwish, a 1x1 conv (bias) + HardSwish, a residual add, and a second block: the patterns
# 2.1.0 writes differently from 1.3.1.
SAVE_TINY_NET = """
import sys, paddle
paddle.seed(0)
class Block(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(8, 8, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(8)
        self.point = paddle.nn.Conv2D(8, 8, 1)
    def forward(self, x):
        y = paddle.nn.functional.hardswish(self.bn(self.conv(x)))
        return x + paddle.nn.functional.hardswish(self.point(y))
net = paddle.nn.Sequential(paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.Hardswish(), Block(), Block())
for layer in net.sublayers():  # BN statistics away from the identity, so folding them is seen in the outputs
    if isinstance(layer, paddle.nn.BatchNorm2D):
        layer._mean.set_value(paddle.rand([8]) - 0.5)
        layer._variance.set_value(paddle.rand([8]) + 0.5)
net.eval()
paddle.jit.save(net, sys.argv[1], input_spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")])
"""

# What the lowering makes of the graph: the rewrites the normalising is for, and the integer graph it gives.
LOWERING_COUNTS = ("paddle_quantized_nodes", "folded_activations", "paddle_activation_scales",
                   "paddle_weight_scales", "per_channel_weights", "float_layers", "derived_activation_scales",
                   "integer_hardswish", "quantize_linear", "dequantize_linear")


def run_paddle(script: str, pir: bool, *args: Path) -> None:
    env = {**os.environ, "FLAGS_enable_pir_api": "1" if pir else "0"}
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def convert_pir(folder: Path, onnx_file: Path, scratch: Path) -> Path:
    """paddle2onnx 2.1.0's FP32 graph of a PIR folder, unnormalised."""
    scratch.mkdir(parents=True, exist_ok=True)
    done = convert_to_onnx(folder / "inference.json", folder / "inference.pdiparams", onnx_file, OPSET,
                           find_converter(), scratch)
    assert not isinstance(done, ChildFailed) and onnx_file.stat().st_size > 0, done
    return onnx_file


def ops(model: onnx.ModelProto) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def outputs(model: onnx.ModelProto | Path, inputs: np.ndarray) -> list[np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: inputs})


@pytest.fixture(scope="module")
def tiny_net(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    run_paddle(SAVE_TINY_NET, True, root / "pir" / "inference")
    return convert_pir(root / "pir", root / "fp32.onnx", root / "scratch")


def test_the_tiny_net_as_2_1_0_writes_it_is_not_what_1_3_1_writes(tiny_net):
    # Why the normalising exists: if a paddle2onnx upgrade stops writing these, this test says so.
    written = ops(onnx.load(str(tiny_net)))
    assert written["Identity"] > 0 and written["HardSigmoid"] == 5 and written["HardSwish"] == 0
    assert written["Reshape"] >= 5  # each conv bias reshaped to [1, C, 1, 1] and added after the Conv


def test_the_normalised_tiny_net_has_1_3_1s_shapes_and_the_same_outputs(tiny_net):
    original = onnx.load(str(tiny_net))
    normalised = normalise(original)
    graph, found = normalised.model.graph, ops(normalised.model)

    assert found["Identity"] == 0 and found["HardSigmoid"] == 0 and found["HardSwish"] == 5
    assert found["Reshape"] == 0  # nothing but constants was reshaped
    convs = [node for node in graph.node if node.op_type == "Conv"]
    assert len(convs) == 5 and all(len(conv.input) == 3 for conv in convs)  # every bias inside its Conv
    assert {conv.input[2] for conv in convs} == {f"conv2d_{index}.b_0" for index in range(5)}  # Paddle's names
    assert found["Add"] == 2 and found["BatchNormalization"] == 2  # the residuals; BN folds at calibration
    assert next(opset.version for opset in normalised.model.opset_import if opset.domain == "") == 14
    assert normalised.counts["hardswish_rebuilt"] == 5 and normalised.counts["conv_biases_fused"] == 5
    assert normalised.counts["identities_dropped"] == ops(original)["Identity"]
    assert [value.name for value in graph.output] == [value.name for value in original.graph.output]

    inputs = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32) * 3
    before, after = outputs(original, inputs)[0], outputs(normalised.model, inputs)[0]
    assert np.abs(before).max() > 1 and np.abs(after - before).max() <= 1e-5


def test_normalise_file_writes_the_normalised_graph_and_leaves_no_temporary_file(tiny_net, tmp_path):
    counts = normalise_file(tiny_net, tmp_path / "out" / "normalised.onnx")
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["normalised.onnx"]
    assert ops(onnx.load(str(tmp_path / "out" / "normalised.onnx")))["HardSwish"] == counts["hardswish_rebuilt"] == 5


@pytest.mark.slow
def test_the_pp_ocrv4_twin_normalised_lowers_with_the_rewrites_of_1_3_1s_graph(tmp_path):
    """PP-OCRv4 rec: 1.3.1's graph of the legacy folder and the normalised 2.1.0 graph of its PIR twin, calibrated
    alike (abs_max on 16 rendered lines) and lowered: the same rewrites, the same INT8 outputs."""
    from quantgate.int8.onnx_conversion import to_onnx
    from quantgate.stages.quantize.onnx_calibration import calibrate_onnx_graph, lower_calibrated

    rec = paddleocr_models().rec
    run_paddle(TRANSLATE_TO_PIR, False, rec, tmp_path / "twin")
    twin = convert_pir(tmp_path / "twin", tmp_path / "twin.onnx", tmp_path / "scratch")
    legacy = tmp_path / "legacy.onnx"
    to_onnx(rec / "inference.pdmodel", rec / "inference.pdiparams", legacy)
    counts = normalise_file(twin, tmp_path / "normalised.onnx")
    assert counts["hardswish_rebuilt"] == 28 and counts["identities_dropped"] > 200

    entries = render_financial_lines(tmp_path / "lines", 16, seed=3)
    lines = model_inputs([tmp_path / "lines" / path for path, _ in entries], REC_SHAPE).astype(np.float32)
    assert np.abs(outputs(tmp_path / "normalised.onnx", lines)[0] - outputs(legacy, lines)[0]).max() <= 1e-5

    recipe = SimpleNamespace(algo="abs_max", hist_percent=0.9999, weight_quantize_type="channel_wise_abs_max")
    lowered = {}
    for name, fp32 in (("legacy", legacy), ("twin", tmp_path / "normalised.onnx")):
        calibration = calibrate_onnx_graph(fp32, lambda: (lines[:8], lines[8:]), recipe, (), tmp_path / f"{name}.raw")
        metrics = lower_calibrated(calibration, tmp_path / f"{name}.int8.onnx").metrics
        lowered[name] = {**{key: metrics[key] for key in LOWERING_COUNTS},
                         "qdq_pairs": calibration.metrics["qdq_pairs"],
                         "absorbed_affines": {key: value for key, value in metrics["absorbed_affines"].items()
                                              if key != "kept"}}  # "kept" names tensors 2.1.0 numbers differently
    assert lowered["twin"] == lowered["legacy"]
    assert lowered["twin"]["integer_hardswish"] == 13 and lowered["twin"]["absorbed_affines"]["into_convolution"] > 0
    int8 = [outputs(tmp_path / f"{name}.int8.onnx", lines)[0] for name in ("legacy", "twin")]
    assert np.abs(int8[0] - int8[1]).max() <= 1e-5


@pytest.mark.slow
def test_the_pp_ocrv4_twin_converts_through_convert_fp32_normalised_and_matches_paddle(tmp_path):
    """2.1.0's own graph of the twin cannot be loaded by onnxruntime (a Concat of rank-0 and rank-1 shape pieces):
    the conversion normalises before it checks, so the twin converts, and the kept model is the normalised one."""
    from quantgate.pir.conversion import convert_fp32
    from quantgate.pir.folder import PirFolder

    run_paddle(TRANSLATE_TO_PIR, False, paddleocr_models().rec, tmp_path / "twin")
    entries = render_financial_lines(tmp_path / "lines", 4, seed=5)
    lines = model_inputs([tmp_path / "lines" / path for path, _ in entries], REC_SHAPE).astype(np.float32)
    (tmp_path / "out").mkdir()
    record = convert_fp32(PirFolder(tmp_path / "twin", "inference"), tmp_path / "out" / "fp32.onnx", lines, OPSET)

    assert record["normalised"]["scalars_unsqueezed_for_concat"] > 0  # what onnxruntime could not load
    assert record["normalised"]["hardswish_rebuilt"] == 28 and record["normalised"]["identities_dropped"] > 200
    checked = record["check_vs_paddle"]
    assert checked["samples"] == 4 and checked["max_abs_diff"] <= checked["max_abs_diff_limit"]
    kept = ops(onnx.load(str(tmp_path / "out" / "fp32.onnx")))
    assert kept["Identity"] == 0 and kept["HardSwish"] == 28 and record["ops"] == dict(sorted(kept.items()))
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["fp32.onnx"]  # no scratch left behind
