"""Leave float the grids that only feed an FP32 layer: a fall-back reverts the layer's whole group.

PaddleSlim's skip list leaves a layer's weight and its own input in FP32, and nothing else. On PP-LCNetV3
(PP-OCRv4's recognizer) the tensors upstream of that input keep their grids: a residual Add's output, the
HardSwish that reads it (run by the lowering as an integer Add and Mul only between two grids), the affine
after it. Once the layer is float, every op between those grids and the layer is float too, so the grids
are roundings no integer kernel reads: they cost accuracy and time and buy nothing. Measured on the
pattern nets (tests/stages/test_fallback_groups.py): skipping the 1x1 convolution after a residual block
left the block's output grid in place, in front of a float HardSwish.

A layer's *group* is the layer and the region that feeds it: walking back from its input through ops that
are not layers, every tensor whose readers are all in the region joins it, and so does its producer. The
walk stops at a layer's output (the tensor joins when the region alone reads it, as the lowering always
did for a layer feeding only an FP32 layer; the layer itself keeps its integer weights) and at any tensor
another node still reads (an INT8 consumer keeps its grid). The grids of the region's tensors are dropped
before the quantizer runs, so the region runs in float, as it does in FP32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import onnx

from quantgate.int8.paddle_quantization import LAYER_OPS, PaddleQuantization


def feeding_grids(graph: onnx.GraphProto, float_layers: Iterable[str], scales: dict[str, float]) -> dict[str, list[str]]:
    """Per FP32 layer (weight name) in `graph` (the float graph PaddleSlim calibrated), the tensors of `scales`
    whose grids only feed it (see the module's doc), in graph order; layers not in `graph` are left out."""
    float_layers = set(float_layers)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    producers = {output: node for node in graph.node for output in node.output}
    constants = {init.name for init in graph.initializer}
    outputs = {output.name for output in graph.output}
    order = {output: index for index, node in enumerate(graph.node) for output in node.output}
    grids = {}
    for layer in (node for node in graph.node if node.op_type in LAYER_OPS and node.input[1:2]
                  and node.input[1] in float_layers):
        region, tensors = {id(layer)}, set()
        changed = True
        while changed:  # a tensor read by two region nodes (a diamond) joins once both have
            changed = False
            candidates = {name for node in graph.node if id(node) in region for name in node.input[:1 if
                          node.op_type in LAYER_OPS else None]}
            for tensor in sorted(candidates - tensors - constants - outputs):
                producer = producers.get(tensor)
                if not all(id(reader) in region for reader in readers.get(tensor, [])):
                    continue
                tensors.add(tensor)
                if producer is not None and producer.op_type not in LAYER_OPS:
                    region.add(id(producer))
                changed = True
        grids[layer.input[1]] = sorted((tensor for tensor in tensors if tensor in scales),
                                       key=lambda name: order.get(name, -1))
    return grids


def without_feeding_grids(quantization: PaddleQuantization) -> tuple[PaddleQuantization, dict[str, list[str]]]:
    """`quantization` with the grids feeding only its FP32 layers dropped, and which were dropped per layer.

    A node that reads or writes a dropped tensor leaves the quantized nodes: the quantizer is never asked
    for a scale it was not given.
    """
    grids = feeding_grids(quantization.float_model.graph, quantization.float_layers, quantization.activation_scales)
    dropped = {tensor for tensors in grids.values() for tensor in tensors}
    if not dropped:
        return quantization, grids
    nodes = {node.name: node for node in quantization.float_model.graph.node}
    touching = {name for name in quantization.quantized_nodes
                if dropped & (set(nodes[name].input) | set(nodes[name].output))}
    return dataclasses.replace(
        quantization,
        activation_scales={name: scale for name, scale in quantization.activation_scales.items()
                           if name not in dropped},
        quantized_nodes=tuple(name for name in quantization.quantized_nodes if name not in touching),
        float_nodes_with_quantized_inputs=(*quantization.float_nodes_with_quantized_inputs, *sorted(touching)),
    ), grids
