"""7-bit weights for onnxruntime on x86 CPUs without an INT8 dot product (AVX2, AVX-512 without VNNI).

There, MLAS multiplies uint8 activations by int8 weights with `vpmaddubsw`, which adds each pair of
products in 16 bits and saturates: 2 · 255 · 127 = 64770 does not fit in 32767. The ConvSym and QGEMM
kernels then compute a different convolution than the model says (on the digits CNN, logits up to 3.6
apart between two forms that are equal to the bit on VNNI). onnxruntime's own quantizer offers
`reduce_range` for this: with weights in [-64, 63] a pair of products is at most 2 · 255 · 64 = 32640.
With VNNI or AMX (`vpdpbusd`, tile products) the sums are 32-bit and every weight keeps 8 bits.

Measured on an AVX2-only EPYC (2 threads): the digits CNN's INT8 reads 97.78 % with 8-bit weights,
98.06 % with 7-bit weights, 98.33 % in FP32, at the same speed (7.93 and 8.00 ms at batch 64); uint8
weights (exact, QGEMM U8U8) were slower than FP32. PP-OCRv4's recognizer, equalized and with its stem in
FP32: 90.0 % of lines with 8-bit weights, 96.0 % with 7-bit, 98.67 % in FP32.

Depthwise convolutions keep 8 bits: MLAS's depthwise kernels sum in 32 bits on every CPU.

Halving 8-bit codes rounds twice; the quantize stage puts the weights of a model meant for such a CPU on the
7-bit grid itself, rounded once from FP32 (`quantize/quantized_weights.py`), and halving those codes is exact.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.runtimes.cpu import cpu_record

INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
REDUCED_LOW, REDUCED_HIGH = -64, 63


@dataclass(frozen=True)
class WeightBits:
    """The weight precision the INT8 model is lowered with, and why."""

    bits: int  # 8, or 7 where onnxruntime's u8 x s8 kernels saturate
    why: str

    def record(self) -> dict:
        return {"weight_bits": self.bits, "weight_bits_why": self.why}


def onnxruntime_weight_bits(cpu_flags: list[str] | tuple[str, ...]) -> WeightBits:
    """7 on an x86 CPU with AVX2 and none of VNNI/AMX (`cpu_flags` as `runtimes.cpu.cpu_record` lists them), else 8."""
    found = [flag for flag in INT8_DOT_PRODUCT_FLAGS if flag in cpu_flags]
    if found:
        return WeightBits(8, f"this CPU sums INT8 products in 32 bits ({', '.join(found)})")
    if "avx2" in cpu_flags:
        return WeightBits(7, "this CPU has AVX2 but no VNNI/AMX: onnxruntime's u8 x s8 kernels add pairs of products "
                             "in 16 bits and saturate with 8-bit weights (onnxruntime's reduce_range)")
    return WeightBits(8, "no AVX2 reported: onnxruntime does not take its AVX2 INT8 kernels here")


def this_cpus_weight_bits() -> WeightBits:
    """How many bits the INT8 weights keep for onnxruntime on this machine's CPU (the quantize stage rounds to
    that grid, the convert stage lowers with it; both keep it in their reuse keys)."""
    return onnxruntime_weight_bits(cpu_record()["flags"])


def reduce_weight_range(model: onnx.ModelProto) -> int:
    """Requantize the int8 weights of `model`'s QDQ Conv, MatMul and Gemm nodes to [-64, 63] (scale doubled,
    the int32 bias of a Conv with it: its scale is x_scale * w_scale), in place. Depthwise convolutions, and a
    node whose weight, bias or their scales another DequantizeLinear reads too, keep theirs. Returns the
    weights changed.
    """
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    readers = Counter(name for node in graph.node for name in node.input)
    reduced: set[str] = set()  # DequantizeLinear outputs done (two nodes may read one weight)
    for node in graph.node:
        if node.op_type not in ("Conv", "MatMul", "Gemm") or len(node.input) < 2 \
                or _depthwise(node, initializers, producers):
            continue
        weight = _constant_dequantize(producers.get(node.input[1]), initializers, onnx.TensorProto.INT8)
        if weight is None or weight.output[0] in reduced:
            continue
        rescaled = [(weight, _halved_weight)]
        if node.op_type == "Conv" and len(node.input) > 2 and node.input[2]:
            bias = _constant_dequantize(producers.get(node.input[2]), initializers, onnx.TensorProto.INT32)
            if bias is None:
                continue
            rescaled.append((bias, _halved_bias))
        if any(readers[name] != 1 for dequantize, _ in rescaled for name in dequantize.input[:2]):
            continue
        for dequantize, halve in rescaled:
            values, scale = (numpy_helper.to_array(initializers[name]) for name in dequantize.input[:2])
            _set(initializers, dequantize.input[0], halve(values))
            _set(initializers, dequantize.input[1], (scale * 2).astype(scale.dtype))
        reduced.add(weight.output[0])
    return len(reduced)


def _halved_weight(values: np.ndarray) -> np.ndarray:
    return np.clip(np.round(values / 2.0), REDUCED_LOW, REDUCED_HIGH).astype(np.int8)


def _halved_bias(values: np.ndarray) -> np.ndarray:
    return np.round(values.astype(np.float64) / 2.0).astype(np.int32)


def _constant_dequantize(node, initializers: dict, data_type: int):
    """`node` if it is a DequantizeLinear of a `data_type` initializer with an initializer scale, else None."""
    if node is None or node.op_type != "DequantizeLinear" or node.input[0] not in initializers \
            or node.input[1] not in initializers:
        return None
    return node if initializers[node.input[0]].data_type == data_type else None


def _depthwise(node, initializers: dict, producers: dict) -> bool:
    group = next((attribute.i for attribute in node.attribute if attribute.name == "group"), 1)
    if node.op_type != "Conv" or group == 1:
        return False
    weight = _constant_dequantize(producers.get(node.input[1]), initializers, onnx.TensorProto.INT8)
    return weight is not None and initializers[weight.input[0]].dims[1] == 1


def _set(initializers: dict, name: str, values: np.ndarray) -> None:
    initializers[name].CopyFrom(numpy_helper.from_array(values, name))
