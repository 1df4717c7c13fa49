"""Carry PaddleSlim's scales across the ops it leaves float between two quantized tensors.

PaddleSlim quantizes the inputs of its quantizable ops (conv, depthwise conv, mul/matmul, add) and
nothing else, so a network's tail often reads

    conv -> ReLU6 -> GlobalAveragePool -> flatten -> linear
      (scaled)  (no scale)   (no scale)     (scaled)

and the lowered model dequantizes the whole feature map, transposes it back to NCHW, clips and pools
it in float and quantizes it again for the linear layer. No new scale is needed to keep that tail in
integers; each one below comes from a tensor PaddleSlim did scale:

- a ReLU, or a ReLU6 whose bound lies at or above its input's range (127 x scale), that is its
  input's only reader outputs a subset of that range: it takes its input's scale and is then folded
  into the producer's output quantization (see `lower_int8.folded_activations`), as a scaled ReLU is;
- an average pool whose output reaches a scaled tensor only through reshapes (Shape reads aside)
  takes that tensor's scale, which is where Paddle quantizes the same values anyway; onnxruntime
  then runs it as QLinearGlobalAveragePool on the NHWC tensor, with no transpose of the feature map.

Nothing here invents a range: a tensor whose scale cannot be derived this way stays float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

RESHAPING_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
POOLING_OPS = ("GlobalAveragePool", "AveragePool")


@dataclass(frozen=True)
class PropagatedScales:
    activation_scales: dict[str, float]  # PaddleSlim's plus the derived ones
    derived_from: dict[str, str]  # derived tensor -> the PaddleSlim-scaled tensor its scale comes from
    lowered_nodes: tuple[str, ...]  # nodes that now have a scale on every input and output they quantize


def _is_relu(node: onnx.NodeProto, constants: dict[str, np.ndarray], threshold: float) -> bool:
    """A ReLU, or a Clip at 0 whose upper bound does not cut into the input's quantized range."""
    if node.op_type == "Relu":
        return True
    if node.op_type != "Clip" or len(node.input) != 3:
        return False
    low, high = (constants.get(name) for name in node.input[1:3])
    return low is not None and high is not None and float(low) == 0.0 and float(high) >= threshold


def propagate_scales(model: onnx.ModelProto, activation_scales: dict[str, float]) -> PropagatedScales:
    """Scales for the float ReLUs and average pools that sit between PaddleSlim's scaled tensors.

    `model` is the float graph the lowering quantizes (topologically sorted, as paddle2onnx writes it).
    """
    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    graph_outputs = {output.name for output in graph.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    scales = dict(activation_scales)
    derived: dict[str, str] = {}
    lowered: list[str] = []

    def value_consumers(tensor: str) -> list[onnx.NodeProto]:
        return [node for node in consumers.get(tensor, []) if node.op_type != "Shape"]

    for node in graph.node:
        if not node.input or not node.output or node.output[0] in scales or node.output[0] in graph_outputs:
            continue
        source, output = node.input[0], node.output[0]
        if source not in scales:
            continue
        if _is_relu(node, constants, 127 * scales[source]) and len(consumers[source]) == 1:
            scales[output] = scales[source]
            derived[output] = derived.get(source, source)
            lowered.append(node.name)
        elif node.op_type in POOLING_OPS:
            chain, tensor = [], output
            while tensor not in scales:
                readers = value_consumers(tensor)
                if (len(readers) != 1 or readers[0].op_type not in RESHAPING_OPS or readers[0].input[0] != tensor
                        or tensor in graph_outputs):
                    break
                chain.append(readers[0])
                tensor = readers[0].output[0]
            if tensor not in scales or tensor in derived:
                continue
            for step in (node, *chain[:-1]):
                scales[step.output[0]] = scales[tensor]
                derived[step.output[0]] = tensor
            lowered += [node.name, *(step.name for step in chain)]
    return PropagatedScales(scales, derived, tuple(lowered))
