"""PaddleSlim's scales carried across float ReLUs and average pools, never invented."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantgate.int8.scale_propagation import propagate_scales


def tail(clip_high: float, pool_reader: str = "Reshape") -> onnx.ModelProto:
    """conv -> Clip(0, clip_high) -> GlobalAveragePool -> (Shape, pool_reader) -> MatMul, as paddle2onnx writes it."""
    initializers = [numpy_helper.from_array(np.array(value, np.float32), name)
                    for name, value in (("low", 0.0), ("high", clip_high))]
    initializers += [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w"),
                     numpy_helper.from_array(np.ones((4, 2), np.float32), "fc")]
    reader = (helper.make_node("Reshape", ["pool", "shape"], ["flat"], name="flatten") if pool_reader == "Reshape"
              else helper.make_node(pool_reader, ["pool"], ["flat"], name="flatten"))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], name="conv"),
        helper.make_node("Clip", ["conv", "low", "high"], ["relu6"], name="relu6"),
        helper.make_node("GlobalAveragePool", ["relu6"], ["pool"], name="pool"),
        helper.make_node("Shape", ["pool"], ["shape_full"], name="shape"),
        helper.make_node("Slice", ["shape_full", "low", "high"], ["shape"], name="slice"),
        reader,
        helper.make_node("MatMul", ["flat", "fc"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2])], initializers)
    return helper.make_model(graph)


PADDLE_SCALES = {"x": 0.01, "conv": 0.02, "flat": 0.005}  # conv's range: 127 x 0.02 = 2.54


def test_relu6_and_pool_take_the_scales_of_paddleslims_tensors():
    propagated = propagate_scales(tail(clip_high=6.0), PADDLE_SCALES)
    assert propagated.derived_from == {"relu6": "conv", "pool": "flat"}
    assert propagated.activation_scales["relu6"] == 0.02 and propagated.activation_scales["pool"] == 0.005
    assert propagated.lowered_nodes == ("relu6", "pool", "flatten")
    assert {name: propagated.activation_scales[name] for name in PADDLE_SCALES} == PADDLE_SCALES


def test_a_clip_that_cuts_into_the_quantized_range_stays_float():
    propagated = propagate_scales(tail(clip_high=1.0), PADDLE_SCALES)  # 1.0 < 2.54: the clip changes values
    assert "relu6" not in propagated.derived_from and "pool" not in propagated.derived_from
    assert propagated.lowered_nodes == ()


def test_a_pool_whose_output_reaches_no_scaled_tensor_stays_float():
    propagated = propagate_scales(tail(clip_high=6.0, pool_reader="Softmax"), PADDLE_SCALES)
    assert propagated.derived_from == {"relu6": "conv"}
    assert "pool" not in propagated.activation_scales
