"""The INT8 graph paddle2onnx 1.3.1 writes for a PaddleSlim model, written instead from an FP32 ONNX graph and scales.

`lower_int8` reads paddle2onnx 1.3.1's raw INT8 ONNX (`paddle_quantization`). A model PaddleSlim cannot calibrate
(a PIR program) is calibrated on its FP32 ONNX graph instead; to lower it unchanged, its scales are written in the
very pattern paddle2onnx 1.3.1's ONNX Runtime processor (`ort_quantize_processor.cc`, `base_quantize_processor.cc`)
writes, step by step:

1. `fold_batch_norms`: a Conv read only by a BatchNormalization takes the BN in (its weights scaled per channel,
   a bias made), its output keeping the conv's name and taking the BN output's scale (MergeConvBN);
2. `observed_tensors`: the tensors PaddleSlim measures: every activation input and output of a quantizable
   layer (Conv, ConvTranspose, MatMul), and the output of every op of its observer list (their ONNX images);
3. `write_qdq`: a node of paddle2onnx's list (Add, Conv, Mul, Relu, Sigmoid: its source concatenates "LeakyRelu"
   "MatMul", so neither is in it) whose inputs and output all have a scale, its output not a graph output, gets
   every one quantized; each such tensor gets one Q/DQ pair, read by all its readers, or only by those of the list
   when it has several readers and some are not (AddQDQInModel). Biases stay float: the lowering re-derives them.

Scales follow Paddle's convention: scale = threshold / 127, int8 zero point 0, weights per output channel
(axis 0 for Conv, 1 for MatMul and ConvTranspose, as paddle's `_channelwise_quant_axis1_ops`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from quantgate.int8.errors import ConversionError
from quantgate.int8.onnx_ops import drop_unused_initializers, tensor_readers
from quantgate.int8.paddle_quantization import WeightScales, constants_to_initializers, name_nodes

QDQ_NODE_TYPES = ("Add", "Conv", "Mul", "Relu", "Sigmoid")  # paddle2onnx 1.3.1's supported_quantize_type_
LAYER_WEIGHT_AXIS = {"Conv": 0, "ConvTranspose": 1, "MatMul": 1}  # PaddleSlim's quantizable ops, their channel axis
# The ONNX images of PaddleSlim's observer ops (SUPPORT_ACT_QUANTIZATION_OP_DICT): their outputs are measured.
OBSERVED_OUTPUT_OPS = (
    "Add", "Sub", "Mul", "Pow", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid",
    "Softmax", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Split", "Concat", "Gather",
    "GlobalAveragePool", "AveragePool", "MaxPool", "ReduceMean", "BatchNormalization", "Clip", "Resize", "Pad",
    "Abs", "Cast", "Identity", "Dropout",
)

PADDLE2ONNX_NAME = re.compile(r"[A-Z][A-Za-z]*\.\d+")  # a tensor paddle2onnx named (OpType.N), no Paddle variable
# paddle2onnx's swish is Mul(x, beta) -> Sigmoid -> Mul(x, .): the Sigmoid's output is inside one Paddle op
INTERNAL_OUTPUT_OPS = ("Sigmoid",)


@dataclass(frozen=True)
class Layer:
    """A layer PaddleSlim would quantize: its node, weight (None: two activations, as attention's q k^T) and axis."""

    node: str
    op_type: str
    weight: str | None
    activations: tuple[str, ...]
    output: str
    axis: int


def _initializers(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {init.name: init for init in graph.initializer}


def constants_as_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose Constant nodes (paddle2onnx's weights) are initializers, and whose nodes all have names."""
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    constants_to_initializers(model_copy.graph)
    name_nodes(model_copy.graph)
    return model_copy


def fold_batch_norms(model: onnx.ModelProto) -> int:
    """Fold every BatchNormalization that alone reads a Conv's output into it, in place (paddle2onnx's MergeConvBN,
    float32 arithmetic as its C++). Returns how many were folded."""
    graph = model.graph
    initializers = _initializers(graph)
    readers = tensor_readers(graph)
    outputs = {output.name for output in graph.output}
    folded = []
    for conv in graph.node:
        if conv.op_type != "Conv" or conv.output[0] in outputs or len(readers.get(conv.output[0], ())) != 1:
            continue
        bn = readers[conv.output[0]][0]
        if bn.op_type != "BatchNormalization" or bn.output[0] in outputs or conv.input[1] not in initializers \
                or not all(name in initializers for name in bn.input[1:5]):
            continue
        gamma, beta, mean, variance = (numpy_helper.to_array(initializers[name]).astype(np.float32)
                                       for name in bn.input[1:5])
        epsilon = np.float32(next((attr.f for attr in bn.attribute if attr.name == "epsilon"), 1e-5))
        alpha = gamma / np.sqrt(variance + epsilon)
        weight = numpy_helper.to_array(initializers[conv.input[1]]).astype(np.float32)
        bias = (numpy_helper.to_array(initializers[conv.input[2]]).astype(np.float32) if len(conv.input) > 2
                else np.zeros_like(beta))
        new_weight = weight * alpha.reshape(-1, *([1] * (weight.ndim - 1)))
        new_bias = bias * alpha + (beta - mean * alpha)
        bias_name = conv.input[2] if len(conv.input) > 2 else conv.input[1] + ".merged.bias"
        for name, value in ((conv.input[1], new_weight), (bias_name, new_bias)):
            if name in initializers:
                graph.initializer.remove(initializers[name])
            initializers[name] = numpy_helper.from_array(value.astype(np.float32), name)
            graph.initializer.append(initializers[name])
        if len(conv.input) == 2:
            conv.input.append(bias_name)
        for reader in readers.get(bn.output[0], ()):  # BN's readers read the conv's output, as paddle2onnx rewires
            for index, name in enumerate(reader.input):
                if name == bn.output[0]:
                    reader.input[index] = conv.output[0]
        folded.append(bn)
    for bn in folded:
        graph.node.remove(bn)
    drop_unused_initializers(graph)
    return len(folded)


def quantizable_layers(model: onnx.ModelProto) -> list[Layer]:
    """The Conv/ConvTranspose/MatMul nodes PaddleSlim quantizes, in graph order: a float weight initializer
    (a Conv's or ConvTranspose's input 1; a MatMul's constant input 1), or two activations for a MatMul."""
    graph = model.graph
    initializers = _initializers(graph)
    layers = []
    for node in graph.node:
        if node.op_type not in LAYER_WEIGHT_AXIS or len(node.input) < 2:
            continue
        weight = node.input[1] if node.input[1] in initializers else None
        if weight is not None and initializers[weight].data_type != onnx.TensorProto.FLOAT:
            continue
        if weight is None and node.op_type != "MatMul":
            continue  # a conv with a computed weight: PaddleSlim measures it, paddle2onnx quantizes nothing of it
        activations = tuple(name for name in node.input[:2] if name not in initializers)
        layers.append(Layer(node.name, node.op_type, weight, activations, node.output[0],
                            LAYER_WEIGHT_AXIS[node.op_type]))
    return layers


def observed_tensors(model: onnx.ModelProto, layers: Iterable[Layer]) -> list[str]:
    """The float activations PaddleSlim measures (module docstring, step 2), in graph order."""
    graph = model.graph
    initializers = _initializers(graph)
    wanted = {name for layer in layers for name in (*layer.activations, layer.output)}
    names = [value.name for value in graph.input if value.name in wanted and value.name not in initializers]
    for node in graph.node:
        for name in node.output:
            internal = node.op_type in INTERNAL_OUTPUT_OPS and PADDLE2ONNX_NAME.fullmatch(name)
            if name and (name in wanted or (node.op_type in OBSERVED_OUTPUT_OPS and not internal)) \
                    and name not in names:
                names.append(name)
    return names


def _conv_biases(graph: onnx.GraphProto, weight_scales: WeightScales) -> set[str]:
    """Biases of quantized convs: paddle2onnx gives them scales (input x weight), so they never block a Conv."""
    return {node.input[2] for node in graph.node
            if node.op_type == "Conv" and len(node.input) > 2 and node.input[1] in weight_scales}


def tensors_to_quantize(model: onnx.ModelProto, activation_scales: dict[str, float],
                        weight_scales: WeightScales) -> list[str]:
    """paddle2onnx's tensors_to_be_quantize_ (AddQDQ): every input and output of each node of QDQ_NODE_TYPES whose
    tensors all have a scale and whose output is no graph output, in graph order; conv biases left out."""
    graph = model.graph
    biases = _conv_biases(graph, weight_scales)
    outputs = {output.name for output in graph.output}
    scaled = set(activation_scales) | set(weight_scales) | biases
    chosen: list[str] = []
    for node in graph.node:
        if node.op_type not in QDQ_NODE_TYPES:
            continue
        names = [*node.input, *node.output]
        if not all(name in scaled for name in names) or node.output[0] in outputs:
            continue
        chosen.extend(name for name in names if name not in biases and name not in chosen)
    return chosen


def write_qdq(model: onnx.ModelProto, activation_scales: dict[str, float], weight_scales: WeightScales) -> int:
    """Insert paddle2onnx's Q/DQ pairs into `model` in place (module docstring, step 3); returns the pairs written.

    `activation_scales`: tensor -> scale (threshold / 127); `weight_scales`: weight -> (scales, channel axis or None).

    Raises:
        ConversionError: a weight to quantize is not a float initializer of the graph.
    """
    graph = model.graph
    initializers = _initializers(graph)
    readers = tensor_readers(graph)
    outputs = {output.name for output in graph.output}
    produced = {name for node in graph.node for name in node.output}
    pairs: dict[str, list[onnx.NodeProto]] = {}
    for tensor in tensors_to_quantize(model, activation_scales, weight_scales):
        if tensor in outputs:
            continue
        if tensor in weight_scales:
            if tensor not in initializers:
                raise ConversionError(f"weight {tensor!r} has a scale but is no initializer of the graph")
            scales, axis = weight_scales[tensor]
            scale = np.asarray(scales, np.float32).reshape(-1 if axis is not None else ())
            zero_point = np.zeros(scale.shape, np.int8)
        else:
            scale, zero_point, axis = np.array(activation_scales[tensor], np.float32), np.array(0, np.int8), None
        scale_name, zero_name = f"{tensor}.qdq_scale", f"{tensor}.qdq_zero_point"
        graph.initializer.extend([numpy_helper.from_array(scale, scale_name),
                                  numpy_helper.from_array(zero_point, zero_name)])
        attributes = {"axis": axis} if axis is not None else {}
        quantize = helper.make_node("QuantizeLinear", [tensor, scale_name, zero_name], [f"{tensor}.quantized"],
                                    name=f"{tensor}.QuantizeLinear", **attributes)
        dequantize = helper.make_node("DequantizeLinear", [quantize.output[0], scale_name, zero_name],
                                      [f"{tensor}.dequantized"], name=f"{tensor}.DequantizeLinear", **attributes)
        its_readers = readers.get(tensor, [])
        kept_float = [node for node in its_readers if node.op_type not in QDQ_NODE_TYPES] \
            if len(its_readers) > 1 else []
        if len(kept_float) == len(its_readers):  # no reader of the list: all of them read the pair
            kept_float = []
        for node in its_readers:
            if any(node is kept for kept in kept_float):
                continue
            for index, name in enumerate(node.input):
                if name == tensor:
                    node.input[index] = dequantize.output[0]
        pairs[tensor] = [quantize, dequantize]
    # each pair right after what makes its tensor: the graph stays in topological order
    ordered = [node for name, pair in pairs.items() if name not in produced for node in pair]
    for node in graph.node:
        ordered.append(node)
        ordered.extend(pair_node for name in node.output for pair_node in pairs.get(name, ()))
    del graph.node[:]
    graph.node.extend(ordered)
    return len(pairs)
