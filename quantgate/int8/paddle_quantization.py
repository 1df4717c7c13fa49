"""Read what PaddleSlim decided out of paddle2onnx's INT8 model: which tensors, their scales, per-channel weights.

paddle2onnx writes PaddleSlim's decisions as QuantizeLinear/DequantizeLinear pairs around float
weights, with int8 activations. `read_paddle_quantization` takes the pairs out, leaving the float
graph PaddleSlim calibrated (BatchNorm already folded), and keeps PaddleSlim's scales for the
lowering (`lower_int8`). Linear layers whose Q/DQ paddle2onnx 1.3.1 drops get PaddleSlim's scales
back from its program (`paddle_program_scales`). This module never guesses: a Q/DQ pattern it does
not understand is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import paddle
from onnx import numpy_helper

from quantgate.int8.errors import ConversionError
from quantgate.int8.onnx_ops import drop_unused_initializers
from quantgate.int8.static_graph import load_program, static_mode

LAYER_OPS = ("Conv", "MatMul", "Gemm")  # the layers PaddleSlim quantizes, named by their weight
# onnxruntime quantizes these ops' outputs with their input's parameters, so they need no scale of their own.
SAME_SCALE_OPS = ("MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Split", "TopK")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")

WeightScales = dict[str, tuple[np.ndarray, int | None]]  # name -> (scales, channel axis or None)


@dataclass(frozen=True)
class PaddleQuantization:
    """What PaddleSlim decided, read off paddle2onnx's Q/DQ pairs."""

    float_model: onnx.ModelProto
    activation_scales: dict[str, float]
    weight_scales: WeightScales
    quantized_nodes: tuple[str, ...]  # nodes whose inputs PaddleSlim quantized
    float_nodes_with_quantized_inputs: tuple[str, ...]  # ... that the lowering leaves in float
    float_layers: tuple[str, ...] = ()  # weights of the layers PaddleSlim left in FP32 (skip_tensor_list)


@dataclass
class _QdqPairs:
    """paddle2onnx's DequantizeLinear nodes, read: the float tensor each stands for, and PaddleSlim's scales."""

    replace: dict[str, str] = field(default_factory=dict)  # DQ output -> float tensor it stands for
    activation_scales: dict[str, float] = field(default_factory=dict)
    weight_scales: WeightScales = field(default_factory=dict)
    float_constants: list[onnx.TensorProto] = field(default_factory=list)  # pre-quantized constants, dequantized


def constants_to_initializers(graph: onnx.GraphProto) -> None:
    """Make `graph`'s Constant nodes initializers, in place: paddle2onnx emits weights as Constant nodes, and the
    quantizer quantizes initializers only."""
    kept = []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)


def name_nodes(graph: onnx.GraphProto) -> None:
    """Name `graph`'s unnamed nodes `OpType_index` (underscores added until unique), in place: nodes_to_quantize
    selects by name, and paddle2onnx leaves most nodes unnamed."""
    used = {node.name for node in graph.node if node.name}
    for index, node in enumerate(graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)


def _dequantized_constant(quantized: np.ndarray, zero_point: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    """The float value of a pre-quantized constant, per channel along `axis` when its scale is."""
    quantized, zero_point, scale = (quantized.astype(np.float64), zero_point.astype(np.float64),
                                    scale.astype(np.float64))
    if scale.size > 1:  # per channel along `axis`
        shape = [1] * quantized.ndim
        shape[axis] = -1
        zero_point, scale = zero_point.reshape(shape), scale.reshape(shape)
    return ((quantized - zero_point) * scale).astype(np.float32)


def _seven_bit_grid_step(weight: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    """The 8-bit step of a weight the quantize stage put on the 7-bit grid (even codes, `quantized_weights`), where
    paddle2onnx folded a BatchNorm into it: paddle2onnx then takes the step from the folded weight's abs max over
    127, which is 126/127 or 128/127 of the real step when the largest code is 126 or -128, and the lowering would
    round the codes again. The real step is the candidate on which every weight is an even code; `scale` itself
    where it already holds (no fold, or PaddleSlim's 8-bit codes) or where no candidate does (never a guess)."""
    shape = [1] * weight.ndim
    if scale.size > 1:
        shape[axis] = -1

    def codes(step: np.ndarray) -> np.ndarray:  # an all-zero channel has step 0 and codes 0
        step = step.astype(np.float64).reshape(shape)
        return weight.astype(np.float64) / np.where(step == 0, 1, step)

    def on_grid(values: np.ndarray, modulus: int) -> np.ndarray:
        reduce = tuple(i for i in range(weight.ndim) if scale.size == 1 or i != axis % weight.ndim)
        return np.all(np.abs(values - modulus * np.round(values / modulus)) < 1e-3, axis=reduce).ravel()

    if np.all(on_grid(codes(scale), 1)):
        return scale
    chosen = scale.astype(np.float64).copy().ravel()
    found = np.zeros(chosen.size, bool)
    for peak in (126, 128):
        candidate = scale.astype(np.float64).ravel() * 127 / peak
        fits = on_grid(codes(candidate.reshape(scale.shape)), 2) & ~found
        chosen[fits], found = candidate[fits], found | fits
    return chosen.reshape(scale.shape).astype(scale.dtype) if found.all() else scale


def _read_qdq_pairs(graph: onnx.GraphProto, initializers: dict[str, onnx.TensorProto]) -> _QdqPairs:
    """PaddleSlim's scales from every DequantizeLinear, and the float tensor each DQ output replaces."""
    array = lambda name: numpy_helper.to_array(initializers[name])
    producers = {output: node for node in graph.node for output in node.output}
    pairs = _QdqPairs()
    for node in graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        scale = array(node.input[1]).astype(np.float32)
        zero_point = array(node.input[2]) if len(node.input) > 2 else np.zeros((), np.uint8)
        axis = next((attr.i for attr in node.attribute if attr.name == "axis"), 1)
        source = producers.get(node.input[0])
        if source is not None and source.op_type == "QuantizeLinear":
            tensor = source.input[0]
            if np.any(zero_point != 0) or zero_point.dtype != np.int8:
                raise ConversionError(
                    f"paddle2onnx quantized {tensor!r} with a {zero_point.dtype} zero point {zero_point.ravel()[:4]}; "
                    "the lowering expects PaddleSlim's symmetric int8 (zero point 0)"
                )
            if tensor in initializers:
                scale = _seven_bit_grid_step(array(tensor), scale, axis)
                pairs.weight_scales[tensor] = (scale.ravel(), axis if scale.size > 1 else None)
            elif scale.size == 1:
                pairs.activation_scales[tensor] = float(scale)
            else:
                raise ConversionError(f"activation {tensor!r} has per-channel scales; only weights may")
            pairs.replace[node.output[0]] = tensor
        elif node.input[0] in initializers:
            # A pre-quantized constant (paddle2onnx writes biases as int32 + scale): keep its float value;
            # the quantizer re-derives the int32 bias from the input and weight scales, as Paddle did.
            float_name = f"{node.output[0]}.float"
            values = _dequantized_constant(array(node.input[0]), zero_point, scale, axis)
            pairs.float_constants.append(numpy_helper.from_array(values, float_name))
            pairs.replace[node.output[0]] = float_name
        else:
            raise ConversionError(f"DequantizeLinear {node.name!r} reads {node.input[0]!r}, which is neither a "
                                  "QuantizeLinear output nor a constant; the lowering does not understand this graph")
    return pairs


def _remove_qdq_pairs(graph: onnx.GraphProto, pairs: _QdqPairs) -> list[onnx.NodeProto]:
    """Take the Q/DQ nodes out of `graph`, rewiring their readers to the float tensors; returns the nodes kept."""
    kept = [node for node in graph.node if node.op_type not in QDQ_OPS]
    quantized_tensors = {node.output[0] for node in graph.node if node.op_type == "QuantizeLinear"}
    for node in kept:
        if quantized_tensors & set(node.input):
            raise ConversionError(f"{node.op_type} {node.name!r} reads an int8 tensor directly, not through a "
                                  "DequantizeLinear; the lowering does not understand this graph")
    for node in kept:
        for index, name in enumerate(node.input):
            node.input[index] = pairs.replace.get(name, name)
    for output in graph.output:
        if output.name in pairs.replace:
            raise ConversionError(f"graph output {output.name!r} is a DequantizeLinear output; not supported")
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(pairs.float_constants)
    drop_unused_initializers(graph)
    return kept


def _program_float_layers(kept: list[onnx.NodeProto], initializers: dict[str, onnx.TensorProto],
                          program_scales: WeightScales) -> tuple[str, ...]:
    """Weights of the layers PaddleSlim's program left float, whatever Q/DQ paddle2onnx gave them."""
    # paddle2onnx 1.3.1 gives a layer PaddleSlim left float a weight Q/DQ pair of its own (the float
    # weight, its own scale): PaddleSlim's program, not the ONNX graph, says which layers are INT8.
    return tuple(node.input[1] for node in kept if node.op_type in LAYER_OPS and len(node.input) > 1
                 and node.input[1] in initializers and node.input[1] not in program_scales)


def _restore_dropped_linear_scales(kept: list[onnx.NodeProto], initializers: dict[str, onnx.TensorProto],
                                   program_scales: WeightScales, float_layers: tuple[str, ...], pairs: _QdqPairs,
                                   quantized_inputs: set[str]) -> None:
    """Give MatMul/Gemm layers paddle2onnx converted without Q/DQ pairs PaddleSlim's scales from its program."""
    for node in kept:
        if node.op_type not in ("MatMul", "Gemm") or node.name in quantized_inputs:
            continue
        activation, weight, output = node.input[0], node.input[1], node.output[0]
        if weight in initializers and weight not in float_layers \
                and all(name in program_scales for name in (activation, weight, output)):
            # Only tensors around a linear layer: BatchNorm folding never renames or rescales them.
            scales, axis = program_scales[weight]
            pairs.weight_scales[weight] = (scales, axis if scales.size > 1 else None)
            pairs.activation_scales.setdefault(activation, float(program_scales[activation][0][0]))
            pairs.activation_scales.setdefault(output, float(program_scales[output][0][0]))
            quantized_inputs.add(node.name)


def _lowered_and_left_float(kept: list[onnx.NodeProto], quantized_inputs: set[str], pairs: _QdqPairs,
                            graph: onnx.GraphProto) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The nodes with quantized inputs the lowering quantizes, and those it leaves float."""
    known = set(pairs.activation_scales) | set(pairs.weight_scales) | {init.name for init in graph.initializer}
    lowered, left_float = [], []
    for node in kept:
        if node.name not in quantized_inputs:
            continue
        # Every input and output the quantizer will touch must carry a PaddleSlim scale (or be a
        # constant); a compute node whose output PaddleSlim left float stays float as a whole.
        outputs_scaled = all(output in pairs.activation_scales for output in node.output)
        inputs_scaled = all(name in known for name in node.input if name)
        if node.op_type in LAYER_OPS and node.input[1] not in pairs.weight_scales:
            inputs_scaled = False  # PaddleSlim left this layer's weight float (skip_tensor_list): so does the lowering
        if inputs_scaled and (outputs_scaled or node.op_type in SAME_SCALE_OPS):
            lowered.append(node.name)
        else:
            left_float.append(node.name)
    return tuple(lowered), tuple(left_float)


def read_paddle_quantization(raw: onnx.ModelProto, program_scales: WeightScales | None = None) -> PaddleQuantization:
    """Separate paddle2onnx's INT8 model into its float graph and PaddleSlim's scales.

    `program_scales` (from `paddle_program_scales`) restores the scales of MatMul/Gemm layers that
    PaddleSlim quantized but paddle2onnx converted without their Q/DQ pairs.

    Raises:
        ConversionError: a Q/DQ pattern this lowering does not understand (it never guesses).
    """
    model = onnx.ModelProto()
    model.CopyFrom(raw)
    graph = model.graph
    constants_to_initializers(graph)
    name_nodes(graph)
    initializers = {init.name: init for init in graph.initializer}
    pairs = _read_qdq_pairs(graph, initializers)
    quantized_inputs = {node.name for node in graph.node
                        if node.op_type not in QDQ_OPS and any(name in pairs.replace for name in node.input)}
    kept = _remove_qdq_pairs(graph, pairs)
    float_layers = ()
    if program_scales is not None:
        float_layers = _program_float_layers(kept, initializers, program_scales)
        for weight in float_layers:
            pairs.weight_scales.pop(weight, None)
    if program_scales:
        _restore_dropped_linear_scales(kept, initializers, program_scales, float_layers, pairs, quantized_inputs)
    lowered, left_float = _lowered_and_left_float(kept, quantized_inputs, pairs, graph)
    return PaddleQuantization(model, pairs.activation_scales, pairs.weight_scales, lowered, left_float, float_layers)


def paddle_program_scales(model_prefix: Path) -> WeightScales:
    """PaddleSlim's scales as stored in its quantized program, in ONNX terms (scale / 127 per step).

    Paddle's dequantize_linear keeps the clipping threshold T: q = round(x / T * 127).
    Raises:
        ConversionError: the program is not a PaddleSlim 8-bit model.
    """
    scales = {}
    with static_mode():
        program = load_program(Path(model_prefix))
        with paddle.static.scope_guard(program.scope):
            for op in program.program.global_block().ops:
                if op.type != "dequantize_linear":
                    continue
                if op.attr("bit_length") != 8:
                    raise ConversionError(f"{op.input('X')[0]} is quantized to {op.attr('bit_length')} bits, not 8")
                threshold = np.array(program.scope.find_var(op.input("Scale")[0]).get_tensor(), dtype=np.float32)
                axis = op.attr("quant_axis")
                name = op.input("X")[0].removesuffix(".quantized")
                scales[name] = ((threshold / 127).ravel(), axis if axis >= 0 else None)
    return scales


def quantized_layers(raw_int8_onnx: Path, paddle_model_prefix: Path | None = None) -> list[str]:
    """Weight names of the Conv/MatMul/Gemm layers PaddleSlim quantized, in graph order (the names
    `quantize.skip_tensors` takes)."""
    program_scales = paddle_program_scales(paddle_model_prefix) if paddle_model_prefix is not None else None
    quantization = read_paddle_quantization(onnx.load(str(raw_int8_onnx)), program_scales)
    lowered = set(quantization.quantized_nodes)
    return [node.input[1] for node in quantization.float_model.graph.node
            if node.name in lowered and node.op_type in LAYER_OPS and node.input[1] in quantization.weight_scales]
