"""Per-channel equalization of a depthwise convolution's input on an FP32 ONNX graph, before it is calibrated.

The rewrite `stages/quantize/equalization.py` makes on a Paddle program (its docstring says why: one INT8 grid for a
tensor whose channels span very different ranges), made where a PIR model is calibrated: on its ONNX graph. There
the BatchNorm is already folded into the convolution before it (`paddle2onnx_qdq.fold_batch_norms`), so the chain
is conv → depthwise conv with nothing between them (PP-LCNetV3's stem, in PP-OCRv4 and PP-OCRv5 recognizers).
Channel c of the first conv's output is multiplied by s_c (its filter and bias for that channel), the depthwise
filter of that channel divided by s_c: the graph computes the same function, and the grid fits every channel.
s_c = R / r_c, the one rule both rewrites take (`channel_gains`: r_c the channel's max |x| on the calibration
batches, R the widest channel's, at most MAX_GAIN). Only that exact chain is rewritten: the first conv's output read by the depthwise
conv alone, and every weight and bias involved read by its own conv alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.int8.onnx_ops import tensor_readers

MAX_GAIN = 64.0  # a channel that is nearly always zero is not blown up


@dataclass(frozen=True)
class Equalized:
    """One tensor rescaled for its depthwise convolution (on a graph or a Paddle program): its channels and the
    spread of their ranges before and after."""

    tensor: str
    channels: int
    range_ratio_before: float  # widest channel's range over the narrowest's
    range_ratio_after: float

    def record(self) -> dict:
        return {"tensor": self.tensor, "channels": self.channels,
                "range_ratio_before": round(self.range_ratio_before, 2),
                "range_ratio_after": round(self.range_ratio_after, 2)}


def channel_abs_max(values: np.ndarray) -> np.ndarray:
    """Per channel (axis 1), the max |x| of one batch."""
    return np.abs(values).max(axis=tuple(axis for axis in range(values.ndim) if axis != 1))


def channel_gains(tensor: str, ranges: np.ndarray) -> tuple[np.ndarray, Equalized]:
    """Each channel's factor s_c = R / r_c (at least 1, at most MAX_GAIN), and what it does to the ranges."""
    ranges = np.asarray(ranges, np.float64)
    gains = np.clip(ranges.max() / np.maximum(ranges, 1e-12), 1.0, MAX_GAIN)
    after = ranges * gains
    return gains, Equalized(tensor, len(gains), float(ranges.max() / max(ranges.min(), 1e-12)),
                            float(after.max() / max(after.min(), 1e-12)))


def _group(node: onnx.NodeProto) -> int:
    return next((attribute.i for attribute in node.attribute if attribute.name == "group"), 1)


def depthwise_pairs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """(conv, depthwise conv) pairs the rewrite applies to, in graph order."""
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    readers = tensor_readers(graph)
    outputs = {output.name for output in graph.output}
    pairs = []
    for conv in graph.node:
        if conv.op_type != "Conv" or conv.output[0] in outputs or conv.input[1] not in initializers:
            continue
        consumers = readers.get(conv.output[0], [])
        if len(consumers) != 1 or consumers[0].op_type != "Conv" or consumers[0].input[0] != conv.output[0]:
            continue
        depthwise = consumers[0]
        channels = initializers[conv.input[1]].dims[0]
        if depthwise.input[1] not in initializers or channels <= 1 or _group(depthwise) != channels \
                or initializers[depthwise.input[1]].dims[1] != 1:
            continue
        own = [*conv.input[1:3], depthwise.input[1]]
        if all(name not in initializers or len(readers.get(name, [])) == 1 for name in own):
            pairs.append((conv, depthwise))
    return pairs


def equalize(model: onnx.ModelProto, ranges: dict[str, np.ndarray]) -> list[dict]:
    """Rescale, in place, the pairs whose tensor (the first conv's output) `channel_abs_max` names, from each
    channel's max |x| on the calibration data (`channel_abs_max`); an `Equalized.record()` per tensor."""
    initializers = {init.name: init for init in model.graph.initializer}
    done = []
    for conv, depthwise in depthwise_pairs(model):
        tensor = conv.output[0]
        if tensor not in ranges:
            continue
        gains, record = channel_gains(tensor, ranges[tensor])
        weight = numpy_helper.to_array(initializers[conv.input[1]])
        filters = numpy_helper.to_array(initializers[depthwise.input[1]])
        multiplier = filters.shape[0] // len(gains)  # a depthwise conv may give each channel several outputs
        _replace(initializers, conv.input[1], weight * gains.reshape(-1, *([1] * (weight.ndim - 1))))
        if len(conv.input) > 2 and conv.input[2]:
            _replace(initializers, conv.input[2], numpy_helper.to_array(initializers[conv.input[2]]) * gains)
        _replace(initializers, depthwise.input[1],
                 filters / np.repeat(gains, multiplier).reshape(-1, *([1] * (filters.ndim - 1))))
        done.append(record.record())
    return done


def _replace(initializers: dict[str, onnx.TensorProto], name: str, value: np.ndarray) -> None:
    initializers[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
