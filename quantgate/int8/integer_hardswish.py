"""Run HardSwish between two quantized tensors on onnxruntime's integer kernels.

onnxruntime has no integer HardSwish: between two quantizations it dequantizes, runs HardSigmoid and
a Mul in float and quantizes again, four passes over a float feature map for every activation of a
PP-LCNetV3 backbone. The same function is two ops onnxruntime does have integer kernels for:

    hardswish(x) = x * clip(x + 3, 0, 6) / 6
                 = QLinearMul(x, t)   with   t = QLinearAdd(x, 3) on the grid [0, 6] (scale 6/255, zero point 0)

The Add's output grid does the clipping: its codes saturate at 0 and 255, that is at 0 and 6, exactly
relu6(x + 3). Read with scale 1/255 instead of 6/255 the same codes are relu6(x + 3) / 6, so the Mul
needs no division. The constant 3 is stored exactly (code 255 at scale 3/255). The only new rounding
is t's own, 1/255 of HardSigmoid's range (recorded as `hardsigmoid_step`); x and the output keep the
grids PaddleSlim calibrated. In QDQ form, written here:

    DQ(x) -> Add(., DQ(3)) -> Q(t; 6/255) -> DQ(t; 1/255) -> Mul(DQ(x), .) -> Q(output)

onnxruntime fuses the Add and Mul into QLinearAdd/QLinearMul, both of which keep the NHWC layout of
the integer convolutions around them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from quantgate.int8.onnx_ops import copied_node

GRID = 255  # uint8 codes of the [0, 6] grid


def integer_hardswish(model: onnx.ModelProto) -> int:
    """Rewrite every HardSwish that reads a uint8 DequantizeLinear alone and feeds a QuantizeLinear alone; returns how many."""
    graph = model.graph
    nodes = list(graph.node)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    producers = {output: node for node in nodes for output in node.output}
    initializers = {init.name: init for init in graph.initializer}
    outputs = {output.name for output in graph.output}

    def uint8_grid(node: onnx.NodeProto) -> bool:
        return (len(node.input) == 3 and node.input[2] in initializers
                and initializers[node.input[2]].data_type == onnx.TensorProto.UINT8
                and numpy_helper.to_array(initializers[node.input[1]]).size == 1)

    constants, constant_initializers, three = _constants(graph)
    rewritten: dict[int, list[onnx.NodeProto]] = {}
    for index, node in enumerate(nodes):
        if node.op_type != "HardSwish":
            continue
        source = producers.get(node.input[0])
        after = readers.get(node.output[0], [])
        if (source is None or source.op_type != "DequantizeLinear" or not uint8_grid(source)
                or len(readers.get(source.output[0], [])) != 1 or len(after) != 1 or after[0].op_type != "QuantizeLinear"
                or node.output[0] in outputs):
            continue
        x, name = source.output[0], node.name or f"HardSwish_{index}"
        t_q, t_dq = f"{name}_relu6_q", f"{name}_relu6_dq"
        rewritten[index] = [
            helper.make_node("Add", [x, constants["three"]], [f"{name}_plus3"], name=f"{name}_plus3"),
            helper.make_node("QuantizeLinear", [f"{name}_plus3", constants["six_step"], constants["zero"]], [t_q],
                             name=f"{name}_relu6"),
            helper.make_node("DequantizeLinear", [t_q, constants["unit_step"], constants["zero"]], [t_dq],
                             name=f"{name}_relu6_over_6"),
            helper.make_node("Mul", [x, t_dq], [node.output[0]], name=f"{name}_times_x"),
        ]
    if not rewritten:
        return 0
    graph.initializer.extend(constant_initializers)
    kept = [three]
    for index, node in enumerate(nodes):
        kept.extend(rewritten.get(index, [copied_node(node)]))
    del graph.node[:]
    graph.node.extend(kept)
    return len(rewritten)


def _constants(graph: onnx.GraphProto) -> tuple[dict[str, str], list[onnx.TensorProto], onnx.NodeProto]:
    """3 as a dequantized uint8 constant, and the two grids of relu6(x + 3): names, initializers, the DQ node."""
    values = {
        "three_q": np.array(GRID, np.uint8), "three_step": np.array(3 / GRID, np.float32),
        "six_step": np.array(6 / GRID, np.float32), "unit_step": np.array(1 / GRID, np.float32),
        "zero": np.array(0, np.uint8),
    }
    taken = {init.name for init in graph.initializer} | {output for node in graph.node for output in node.output}
    names, initializers = {}, []
    for key, value in values.items():
        name = f"quantgate_hardswish_{key}"
        while name in taken:
            name += "_"
        initializers.append(numpy_helper.from_array(value, name))
        names[key] = name
    names["three"] = f"{names['three_q']}_dq"
    three = helper.make_node("DequantizeLinear", [names["three_q"], names["three_step"], names["zero"]],
                             [names["three"]], name=names["three"])
    return names, initializers, three
