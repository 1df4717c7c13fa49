"""Per-channel equalization of the tensors a depthwise convolution reads, before calibration.

PaddleSlim quantizes each activation with one scale for the whole tensor. A depthwise convolution right
after a BatchNorm (PP-LCNetV3's stem: conv → BN → depthwise conv, nothing in between) reads a tensor whose
channels span very different ranges: one grid sized for the widest channel leaves the narrow ones a few
steps. On PP-OCRv4's recognizer that one tensor is worth about 23 points of line accuracy.

A depthwise convolution treats each channel alone, so the BatchNorm's output channel c may be multiplied by
s_c > 0 and the convolution's filter for that channel divided by s_c: the network computes the same function,
and the activation grid now fits every channel. The weights lose nothing, because they are quantized per
output channel (`channel_wise_abs_max`) and a per-channel factor only moves that channel's scale.
s_c = R / r_c, r_c the channel's max |x| on the calibration batches and R the widest channel's, at most
`MAX_GAIN` (a channel that is nearly always zero is not blown up). The BatchNorm's own statistics are no
guide: on PP-OCRv4 they put the widest channel at 8 where the calibration lines reach 29.

Only that exact chain is rewritten: a BatchNorm whose output is read by one depthwise convolution alone, its
parameters read by no other op. Anything else between them (an activation, an affine) would not commute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
from paddle.static.quantization import utils

from quantgate.int8.onnx_equalization import Equalized, channel_abs_max, channel_gains


def _readers(block) -> dict[str, list]:
    readers: dict[str, list] = {}
    for op in block.ops:
        for name in op.input_arg_names:
            readers.setdefault(name, []).append(op)
    return readers


def _depthwise_after_batch_norm(block) -> list[tuple]:
    """(batch_norm op, depthwise conv op) pairs with nothing between them and nothing else reading them."""
    readers = _readers(block)
    pairs = []
    for op in block.ops:
        if op.type != "batch_norm":
            continue
        (output,) = op.output("Y")
        consumers = readers.get(output, [])
        if len(consumers) != 1 or consumers[0].type not in ("depthwise_conv2d", "conv2d"):
            continue
        conv = consumers[0]
        (filter_name,) = conv.input("Filter")
        channels = block.var(output).shape[1]
        if conv.attr("groups") != channels or channels <= 1:
            continue
        shared = [name for name in (*op.input("Scale"), *op.input("Bias"), filter_name)
                  if len(readers.get(name, [])) != 1]
        if not shared:
            pairs.append((op, conv))
    return pairs


def depthwise_inputs(program) -> list[str]:
    """The tensors `equalize` can rescale: BatchNorm outputs read by one depthwise convolution alone."""
    return [batch_norm.output("Y")[0] for batch_norm, _ in _depthwise_after_batch_norm(program.global_block())]


def equalize(program, scope, ranges: dict[str, np.ndarray]) -> list[Equalized]:
    """Rescale the BatchNorm → depthwise convolution pairs whose tensors `ranges` names, in place
    (parameters in `scope`), from each channel's max |x| on the calibration data.

    The program's function is unchanged up to float rounding; what changes is how evenly the BatchNorm's
    output channels fill one per-tensor INT8 grid.
    """
    place, done = paddle.CPUPlace(), []
    for batch_norm, conv in _depthwise_after_batch_norm(program.global_block()):
        tensor = batch_norm.output("Y")[0]
        if tensor not in ranges:
            continue
        (gamma_name,), (beta_name,) = batch_norm.input("Scale"), batch_norm.input("Bias")
        (filter_name,) = conv.input("Filter")
        gamma = utils.load_variable_data(scope, gamma_name)
        beta = utils.load_variable_data(scope, beta_name)
        weights = utils.load_variable_data(scope, filter_name)
        gains, record = channel_gains(tensor, ranges[tensor])
        multiplier = weights.shape[0] // len(gains)  # a depthwise conv may give each channel several outputs
        per_output = np.repeat(gains, multiplier).reshape(-1, *([1] * (weights.ndim - 1)))
        utils.set_variable_data(scope, place, gamma_name, (gamma * gains).astype(gamma.dtype))
        utils.set_variable_data(scope, place, beta_name, (beta * gains).astype(beta.dtype))
        utils.set_variable_data(scope, place, filter_name, (weights / per_output).astype(weights.dtype))
        done.append(record)
    return done


def equalized_copy(fp32, batches, prefix: Path) -> list[Equalized]:
    """Equalize the loaded program `fp32` (a `static_graph.LoadedProgram`) from the per-channel max |x| over
    `batches` (input arrays), and save it as `<prefix>.pdmodel/.pdiparams`; nothing saved when nothing matched.

    Only the ops the equalized tensors depend on run (the executor prunes the rest): for a stem, milliseconds.
    """
    tensors = depthwise_inputs(fp32.program)
    if not tensors:
        return []
    ranges: dict[str, np.ndarray] = {}
    with paddle.static.scope_guard(fp32.scope):
        for images in batches:
            outputs = fp32.executor.run(fp32.program, feed={fp32.feeds[0]: images}, fetch_list=tensors,
                                        use_prune=True)
            for name, values in zip(tensors, outputs):
                ranges[name] = np.maximum(ranges.get(name, 0.0), channel_abs_max(np.asarray(values)))
        done = equalize(fp32.program, fp32.scope, ranges)
        feed = [fp32.program.global_block().var(fp32.feeds[0])]
        paddle.static.save_inference_model(str(prefix), feed, fp32.fetches, fp32.executor, program=fp32.program)
    return done
