"""7-bit weights where onnxruntime's u8 x s8 kernels saturate: the decision per CPU, and the lowered models."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantgate.int8.lower_int8 import lower_int8
from quantgate.int8.onnx_ops import runtime_op_counts
from quantgate.int8.weight_range import onnxruntime_weight_bits, reduce_weight_range
from quantgate.samples.reading import open_data
from tests.support.pattern_nets import pattern_model


def run(onnx_file, images):
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def weights_of(onnx_file, op_types=("Conv", "MatMul", "Gemm")) -> dict[str, tuple[np.ndarray, int]]:
    """Each quantized weight of `op_types` nodes: its int values and the node's group."""
    graph = onnx.load(str(onnx_file)).graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    found = {}
    for node in graph.node:
        dequantize = producers.get(node.input[1]) if node.op_type in op_types else None
        if dequantize is not None and dequantize.op_type == "DequantizeLinear" and dequantize.input[0] in initializers:
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            found[dequantize.input[0]] = (numpy_helper.to_array(initializers[dequantize.input[0]]), group)
    return found


@pytest.mark.parametrize("flags, bits", [(["avx2", "avx512f", "avx512_vnni"], 8), (["avx2", "avx_vnni"], 8),
                                         (["amx_int8", "avx2"], 8), (["avx2"], 7), (["avx2", "avx512f"], 7), ([], 8)])
def test_only_x86_cpus_without_an_int8_dot_product_get_7_bit_weights(flags, bits):
    decision = onnxruntime_weight_bits(flags)
    assert decision.bits == bits and decision.why
    assert decision.record() == {"weight_bits": bits, "weight_bits_why": decision.why}


def test_7_bit_weights_keep_the_integer_kernels_and_the_predictions(stage_dirs, tmp_path):
    raw = stage_dirs.convert / "int8_paddle2onnx.onnx"
    eight = lower_int8(raw, tmp_path / "w8.onnx").metrics
    seven = lower_int8(raw, tmp_path / "w7.onnx", weight_bits=7).metrics
    assert (eight["weight_bits"], eight["reduced_range_weights"]) == (8, 0)
    assert seven["weight_bits"] == 7 and seven["reduced_range_weights"] == len(weights_of(tmp_path / "w8.onnx")) >= 3
    for name, (values, _) in weights_of(tmp_path / "w7.onnx").items():
        assert values.min() >= -64 and values.max() <= 63, name
    assert max(np.abs(values).max() for values, _ in weights_of(tmp_path / "w8.onnx").values()) == 127
    ops = {name: runtime_op_counts(tmp_path / f"{name}.onnx")["ops"] for name in ("w7", "w8")}
    assert ops["w7"] == ops["w8"] and ops["w7"]["QLinearConv"] == 3  # still fused into integer kernels

    images = open_data(stage_dirs.data).array("test")[0]
    fp32, w7 = run(stage_dirs.convert / "fp32.onnx", images), run(tmp_path / "w7.onnx", images)
    assert np.mean(w7.argmax(axis=1) == fp32.argmax(axis=1)) >= 0.97


def test_depthwise_convolutions_keep_8_bit_weights(tmp_path):
    model = pattern_model("se_block", tmp_path / "net")
    lower_int8(model.raw_onnx, tmp_path / "w7.onnx", paddle_model_prefix=model.paddle_prefix, weight_bits=7)
    weights = weights_of(tmp_path / "w7.onnx", ("Conv",))
    depthwise = [values for values, group in weights.values() if group > 1]
    dense = [values for values, group in weights.values() if group == 1]
    assert len(depthwise) == 1 and np.abs(depthwise[0]).max() == 127
    assert dense and all(values.min() >= -64 and values.max() <= 63 for values in dense)


def two_matmuls(shared_dequantize: bool) -> onnx.ModelProto:
    """x @ W @ W, W one int8 weight behind one DequantizeLinear (or one each, reading the same initializers)."""
    weight = numpy_helper.from_array(np.arange(-120, 120, 15, dtype=np.int8).reshape(4, 4), "w")
    scale = numpy_helper.from_array(np.array(0.01, np.float32), "w_scale")
    zero = numpy_helper.from_array(np.array(0, np.int8), "w_zero")
    second = "w_float" if shared_dequantize else "w_float_again"
    nodes = [helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["w_float"]),
             helper.make_node("MatMul", ["x", "w_float"], ["a"]), helper.make_node("MatMul", ["a", second], ["y"])]
    if not shared_dequantize:
        nodes.insert(1, helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["w_float_again"]))
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight, scale, zero])
    return helper.make_model(graph)


def test_a_weight_two_nodes_read_through_one_dequantize_is_halved_once():
    model = two_matmuls(shared_dequantize=True)
    assert reduce_weight_range(model) == 1
    reduced = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    assert reduced["w_scale"] == pytest.approx(0.02) and np.abs(reduced["w"]).max() == 60  # 120 / 2, not / 4


def test_an_initializer_two_dequantize_nodes_read_is_left_as_it_is():
    model = two_matmuls(shared_dequantize=False)
    before = model.SerializeToString()
    assert reduce_weight_range(model) == 0  # halving it for one reader would change the other
    assert model.SerializeToString() == before
