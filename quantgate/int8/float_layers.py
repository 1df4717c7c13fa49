"""Keep the layers PaddleSlim left in FP32 in FP32 inside the lowered model, as onnxruntime runs it.

A layer left out of PaddleSlim's quantization (`quantize.skip_tensors`, the search's fall-backs)
reaches onnxruntime in a form that would quantize it after all, in two ways:

- paddle2onnx 1.3.1 gives its float weight a Q/DQ pair of its own (its own scale, per channel) and
  keeps the Q/DQ on its input, so the "FP32" layer would compute on INT8 values;
- onnxruntime's WeightBiasQuantization optimizer quantizes, per tensor and without calibration,
  the float weight of any Conv/ConvTranspose/Gemm that reads a DequantizeLinear with a scalar scale.

So the lowering drops the weight pair (PaddleSlim's program, not paddle2onnx, says which layers are
quantized), and the two functions here finish the job on the quantized graph: a fall-back layer
reads its input's float tensor, not its dequantized copy (`read_float_inputs`), and any other float
layer that still reads a dequantized tensor gets that input in a form the optimizer leaves alone
(`shield_from_weight_quantization`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.int8.onnx_ops import drop_unused_initializers


def read_float_inputs(model: onnx.ModelProto, float_weights: set[str], folded: dict[str, onnx.NodeProto],
                      constants: dict[str, onnx.TensorProto]) -> list[str]:
    """Layers whose weight is in `float_weights` read the float tensor their input was quantized from.

    The quantizer inserts Q -> DQ on a tensor that quantized nodes read and hands the DQ output to
    every consumer; an FP32 layer is wired back to the Q's input, which is the exact float value.
    Where that tensor's ReLU/Clip was folded into the quantization (`folded`: output -> the removed
    node, `constants`: its bounds), the Q reads the pre-activation value, so the FP32 layer gets a
    copy of the activation applied to it. Q/DQ pairs no node reads any more are removed. Returns the
    names of the rewired layers.
    """
    graph = model.graph
    producers = {output: node for node in graph.node for output in node.output}
    present = {init.name for init in graph.initializer}
    activations: dict[str, str] = {}  # folded tensor -> its float copy
    rewired = []
    for node in list(graph.node):
        if len(node.input) < 2 or node.input[1] not in float_weights:
            continue
        dequantize = producers.get(node.input[0])
        quantize = producers.get(dequantize.input[0]) if dequantize is not None else None
        if dequantize is None or dequantize.op_type != "DequantizeLinear" \
                or quantize is None or quantize.op_type != "QuantizeLinear":
            continue
        source = quantize.input[0]
        if source in folded and source not in activations:
            activation = onnx.NodeProto()
            activation.CopyFrom(folded[source])
            activation.name, activation.input[0] = f"{source}_fp32_{activation.op_type}", source
            del activation.output[:]
            activation.output.append(f"{source}_fp32")
            for name in activation.input[1:]:
                if name and name not in present:
                    graph.initializer.append(constants[name])
                    present.add(name)
            graph.node.insert(list(graph.node).index(quantize), activation)
            activations[source] = activation.output[0]
        node.input[0] = activations.get(source, source)
        rewired.append(node.name)
    _drop_unread_quantization(graph)
    return rewired


def _drop_unread_quantization(graph: onnx.GraphProto) -> None:
    outputs = {output.name for output in graph.output}
    while True:
        read = {name for node in graph.node for name in node.input} | outputs
        unread = [node for node in graph.node if node.op_type in ("QuantizeLinear", "DequantizeLinear")
                  and not any(output in read for output in node.output)]
        if not unread:
            break
        for node in unread:
            graph.node.remove(node)
    drop_unused_initializers(graph)


def shield_from_weight_quantization(model: onnx.ModelProto) -> list[str]:
    """Float Conv/Gemm layers reading a scalar-scale DequantizeLinear read their own per-channel copy.

    The copy repeats the same scale and zero point per channel, so the values are identical; it is
    a form onnxruntime's WeightBiasQuantization optimizer does not match. Returns the layers' names.
    """
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    shielded = []
    for node in list(graph.node):
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or len(node.input) < 2:
            continue
        weight, dequantize = initializers.get(node.input[1]), producers.get(node.input[0])
        if weight is None or weight.data_type != onnx.TensorProto.FLOAT or dequantize is None \
                or dequantize.op_type != "DequantizeLinear" or dequantize.input[1] not in initializers:
            continue
        scale = numpy_helper.to_array(initializers[dequantize.input[1]])
        if scale.size != 1:
            continue
        attributes = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}
        if node.op_type == "Gemm":
            channels = weight.dims[1] if attributes.get("transB", 0) else weight.dims[0]
        elif node.op_type == "Conv":
            channels = weight.dims[1] * attributes.get("group", 1)
        else:
            channels = weight.dims[0]
        zero_point = (numpy_helper.to_array(initializers[dequantize.input[2]]) if len(dequantize.input) > 2
                      else np.zeros((), np.uint8))
        prefix = f"{node.name}_float_input"
        graph.initializer.extend([
            numpy_helper.from_array(np.full(channels, scale.item(), np.float32), f"{prefix}_scale"),
            numpy_helper.from_array(np.full(channels, zero_point.item(), zero_point.dtype), f"{prefix}_zero_point"),
        ])
        graph.node.insert(list(graph.node).index(node), onnx.helper.make_node(
            "DequantizeLinear", [dequantize.input[0], f"{prefix}_scale", f"{prefix}_zero_point"], [prefix],
            name=f"{prefix}_DequantizeLinear", axis=1))
        node.input[0] = prefix
        shielded.append(node.name)
    return shielded
