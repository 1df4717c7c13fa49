"""Per-channel equalization of a depthwise convolution's input on an FP32 ONNX graph, before it is calibrated.

The rewrite `stages/quantize/equalization.py` makes on a Paddle program (its docstring says why: one INT8 grid for a
tensor whose channels span very different ranges), made where a PIR model is calibrated: on its ONNX graph. There
the BatchNorm is already folded into the convolution before it (`paddle2onnx_qdq.fold_batch_norms`), so the chain
is conv → depthwise conv with nothing between them (PP-LCNetV3's stem, in PP-OCRv4 and PP-OCRv5 recognizers).
Channel c of the first conv's output is multiplied by s_c (its filter and bias for that channel), the depthwise
filter of that channel divided by s_c: the graph computes the same function, and the grid fits every channel.
s_c = R / r_c as the Paddle rewrite takes it (r_c the channel's max |x| on the calibration batches, R the widest
channel's, at most MAX_GAIN). Only that exact chain is rewritten: the first conv's output read by the depthwise
conv alone, and every weight and bias involved read by its own conv alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.int8.onnx_ops import tensor_readers

MAX_GAIN = 64.0  # as stages/quantize/equalization.py: a channel that is nearly always zero is not blown up


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


def equalize(model: onnx.ModelProto, channel_abs_max: dict[str, np.ndarray]) -> list[dict]:
    """Rescale, in place, the pairs whose tensor (the first conv's output) `channel_abs_max` names, from each
    channel's max |x| on the calibration data; a record per tensor (`Equalized.record`'s keys)."""
    initializers = {init.name: init for init in model.graph.initializer}
    done = []
    for conv, depthwise in depthwise_pairs(model):
        tensor = conv.output[0]
        if tensor not in channel_abs_max:
            continue
        ranges = np.asarray(channel_abs_max[tensor], np.float64)
        gains = np.clip(ranges.max() / np.maximum(ranges, 1e-12), 1.0, MAX_GAIN)
        weight = numpy_helper.to_array(initializers[conv.input[1]])
        filters = numpy_helper.to_array(initializers[depthwise.input[1]])
        multiplier = filters.shape[0] // len(gains)  # a depthwise conv may give each channel several outputs
        _replace(initializers, conv.input[1], weight * gains.reshape(-1, *([1] * (weight.ndim - 1))))
        if len(conv.input) > 2 and conv.input[2]:
            _replace(initializers, conv.input[2], numpy_helper.to_array(initializers[conv.input[2]]) * gains)
        _replace(initializers, depthwise.input[1],
                 filters / np.repeat(gains, multiplier).reshape(-1, *([1] * (filters.ndim - 1))))
        after = ranges * gains
        done.append({"tensor": tensor, "channels": len(gains),
                     "range_ratio_before": round(float(ranges.max() / max(ranges.min(), 1e-12)), 2),
                     "range_ratio_after": round(float(after.max() / max(after.min(), 1e-12)), 2)})
    return done


def _replace(initializers: dict[str, onnx.TensorProto], name: str, value: np.ndarray) -> None:
    initializers[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
