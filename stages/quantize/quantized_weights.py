"""The quantized weights of PaddleSlim's INT8 program, their grids, and 7-bit weights rounded from FP32.

On an x86 CPU with AVX2 and no VNNI/AMX the convert stage lowers conv/matmul weights to [-64, 63]
(`quantgate/int8/weight_range.py`). Halving PaddleSlim's 8-bit codes there rounds twice: w/s = 2.6 is code 3,
and 3/2 = 1.5 rounds to 2, where the 7-bit grid's nearest point is 1. Over uniform rounding errors that is
1.75x the error power of rounding once (1/48 + 1/8 against 1/12 of a step squared); on PP-OCRv4 rec it cost
3.5 points of line accuracy on 1,001 lines (94.61 % halved, 98.10 % rounded once, FP32 99.40 %).

So on such a CPU the quantize stage puts those weights on the 7-bit grid itself, from the FP32 weights:
code = 2 * clip(round(w / 2s), -64, 63), the even codes of PaddleSlim's own 8-bit grid. Every runtime reads
them as they are (the Paddle program keeps its 8-bit ops and scales), and the lowering's halving is exact.
Depthwise convolutions keep 8 bits, as the lowering keeps them (MLAS's depthwise kernels sum in 32 bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle

from quantgate.int8.static_graph import LoadedProgram

LAYER_TYPES = {"conv2d": ("Input", "Filter", "Output"), "depthwise_conv2d": ("Input", "Filter", "Output"),
               "matmul_v2": ("X", "Y", "Out")}
REDUCED_BITS = 7


@dataclass(frozen=True)
class Layer:
    """One quantized conv/matmul of the INT8 program and what its reconstruction reads."""

    op_type: str
    attrs: dict
    int8_input: str  # the INT8 program's input of the layer (after its quantize/dequantize pair)
    fp32_input: str  # the layer's input in the FP32 program
    output: str
    codes: str  # the persistable that holds the INT8 weight's integer codes (PaddleSlim's weight name)
    scale: str
    quant_axis: int
    bound: int  # codes lie in [-bound - 1, bound]
    batch_norm: tuple[str, str, float] | None  # (scale, variance, epsilon) of a BatchNorm reading the output
    depthwise: bool  # one input channel per filter (MLAS runs it on its depthwise kernels)


def quantized_layers(int8: LoadedProgram, fp32: LoadedProgram) -> tuple[list[Layer], dict[str, str]]:
    """The conv/matmul layers with a quantized weight and input, in program order, and why each other quantized
    weight is left out."""
    block = int8.program.global_block()
    producer = {name: op for op in block.ops for slot in op.output_names for name in op.output(slot)}
    fp32_block = fp32.program.global_block()
    readers = {name: op for op in fp32_block.ops for slot in op.input_names for name in op.input(slot)}
    layers, skipped = [], {}
    for op in block.ops:
        if op.type not in LAYER_TYPES:
            continue
        x_slot, w_slot, out_slot = LAYER_TYPES[op.type]
        dequantize = producer.get(op.input(w_slot)[0])
        if dequantize is None or dequantize.type != "dequantize_linear" \
                or not block.var(dequantize.input("X")[0]).persistable:
            continue  # an activation x activation matmul, or a layer PaddleSlim left in float
        codes = dequantize.input("X")[0]
        if fp32.scope.find_var(codes) is None:
            skipped[codes] = "no FP32 weight of that name"
            continue
        x_dequantize = producer.get(op.input(x_slot)[0])
        x_quantize = producer.get(x_dequantize.input("X")[0]) if x_dequantize is not None else None
        if x_quantize is None or x_quantize.type != "quantize_linear":
            skipped[codes] = "its input is not quantized"
            continue
        output = op.output(out_slot)[0]
        norm = readers.get(output)
        batch_norm = None
        if norm is not None and norm.type == "batch_norm":
            batch_norm = (norm.input("Scale")[0], norm.input("Variance")[0], float(norm.attr("epsilon")))
        attrs = {name: op.attr(name) for name in ("strides", "paddings", "dilations", "groups", "padding_algorithm",
                                                 "data_format", "trans_x", "trans_y") if op.has_attr(name)}
        shape = block.var(codes).shape
        depthwise = op.type != "matmul_v2" and attrs.get("groups", 1) > 1 and shape[1] == 1
        layers.append(Layer(op.type, attrs, op.input(x_slot)[0], x_quantize.input("X")[0], output, codes,
                            dequantize.input("Scale")[0], int(dequantize.attr("quant_axis")),
                            (1 << (int(dequantize.attr("bit_length")) - 1)) - 1, batch_norm, depthwise))
    return layers, skipped


def array(program: LoadedProgram, name: str) -> np.ndarray:
    return np.array(program.scope.find_var(name).get_tensor())


def weight_arrays(int8: LoadedProgram, fp32: LoadedProgram, layer: Layer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`layer`'s INT8 codes, its FP32 weight, and the 8-bit grid step of every weight (PaddleSlim's scale, the abs
    max, over the bound, along the quant axis)."""
    codes, weight = array(int8, layer.codes), array(fp32, layer.codes)
    scale = array(int8, layer.scale)
    step = np.where(scale == 0, 1e-8, scale).astype(np.float32) / layer.bound
    if step.size == 1:
        return codes, weight, step.reshape(())
    shape = [1] * weight.ndim
    shape[layer.quant_axis] = step.size
    return codes, weight, step.reshape(shape)


def grid_factor(layer: Layer, weight_bits: int) -> int:
    """How many 8-bit steps one step of `layer`'s weight grid spans: 2 for a 7-bit weight, else 1."""
    if weight_bits not in (REDUCED_BITS, 8):
        raise ValueError(f"weight_bits must be 7 or 8, not {weight_bits!r}")
    return 2 if weight_bits == REDUCED_BITS and not layer.depthwise else 1


def code_range(layer: Layer, factor: int) -> tuple[int, int]:
    """The lowest and highest code on a grid `factor` 8-bit steps wide, in its own steps."""
    return -(layer.bound + 1) // factor, layer.bound // factor


def nearest_codes(weight: np.ndarray, step: np.ndarray, layer: Layer, factor: int) -> np.ndarray:
    """`weight` rounded to the nearest point of a grid `factor` 8-bit steps wide, as 8-bit codes."""
    return factor * np.clip(np.round(weight / (step * factor)), *code_range(layer, factor))


def is_nearest(codes: np.ndarray, weight: np.ndarray, step: np.ndarray, layer: Layer, factor: int) -> bool:
    return codes.shape == weight.shape and np.array_equal(nearest_codes(weight, step, layer, factor), codes)


def round_weights_to_bits(int8: LoadedProgram, fp32: LoadedProgram, weight_bits: int) -> dict:
    """Put every non-depthwise quantized weight of `int8` (its scope, in place) on the `weight_bits` grid, rounded
    once from `fp32`'s weight. Returns the record: the weights re-rounded, and those left as PaddleSlim stored
    them and why (the lowering halves those)."""
    record = {"weight_bits": weight_bits, "rounded_from_fp32": [], "left": {}}
    if weight_bits == 8:
        return record
    layers, record["left"] = quantized_layers(int8, fp32)
    for layer in layers:
        factor = grid_factor(layer, weight_bits)
        if factor == 1:
            continue
        codes, weight, step = weight_arrays(int8, fp32, layer)
        if not is_nearest(codes, weight, step, layer, 1):
            record["left"][layer.codes] = "its INT8 weight is not the nearest rounding of the FP32 weight"
            continue
        new = nearest_codes(weight, step, layer, factor).astype(codes.dtype)
        int8.scope.find_var(layer.codes).get_tensor().set(new, paddle.CPUPlace())
        record["rounded_from_fp32"].append(layer.codes)
    return record
