"""A conv or matmul layer as one matrix product over sampled output positions (im2col), for AdaRound's steps.

A layer's output at one position (a sample's pixel for a conv, a sample's row for a matmul) is the product of
one row of inputs, the patch under the filter, with the weight; the reconstruction error AdaRound fits is a sum
over positions. So its steps can draw positions instead of whole samples: a conv's step then costs a
(positions x patch) by (patch x channels) product, per group, instead of a convolution over every pixel of a
batch of samples, and a step sees positions from every calibration sample. `rows` cuts the positions out of a
layer's input (Paddle's `unfold`, the im2col of its conv kernels), `product` applies a weight to them; together
they give the layer's output at those positions, exactly (tests/stages/test_unfolded.py).
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F

from quantgate.stages.quantize.quantized_weights import Layer

CHUNK = 8  # samples unfolded at a time: a conv's patches of every pixel are kernel-size times its input


def supported(layer: Layer) -> bool:
    """Whether `rows` can unfold the layer: an NCHW conv with explicit paddings, or a matmul on untransposed rows."""
    if layer.op_type == "matmul_v2":
        return not layer.attrs.get("trans_x", False)
    return (layer.attrs.get("padding_algorithm", "EXPLICIT") == "EXPLICIT"
            and layer.attrs.get("data_format", "NCHW") in ("NCHW", "AnyLayout"))


def _unfold_paddings(paddings: list[int]) -> list[int]:
    """A conv's paddings ([h, w] or [top, bottom, left, right]) in unfold's order [top, left, bottom, right]."""
    if len(paddings) == 2:
        return [paddings[0], paddings[1], paddings[0], paddings[1]]
    top, bottom, left, right = paddings
    return [top, left, bottom, right]


def _unfolded(layer: Layer, x: paddle.Tensor, kernel: tuple[int, int]) -> paddle.Tensor:
    """(samples * positions, channels * kernel) patches of a conv's input; a matmul's rows as they are."""
    if layer.op_type == "matmul_v2":
        return x.reshape([-1, x.shape[-1]])
    patches = F.unfold(x, kernel, strides=layer.attrs["strides"], paddings=_unfold_paddings(layer.attrs["paddings"]),
                       dilations=layer.attrs["dilations"])  # (samples, channels * kernel, positions)
    return patches.transpose([0, 2, 1]).reshape([-1, patches.shape[1]])


def positions(layer: Layer, inputs: np.ndarray, weight_shape: tuple[int, ...]) -> int:
    """How many output positions the layer has over all of `inputs`."""
    with paddle.no_grad():
        return len(_unfolded(layer, paddle.to_tensor(inputs[:1]), tuple(weight_shape[2:]))) * len(inputs) \
            if layer.op_type != "matmul_v2" else int(np.prod(inputs.shape[:-1]))


def rows(layer: Layer, inputs: np.ndarray, picked: np.ndarray, weight_shape: tuple[int, ...]) -> paddle.Tensor:
    """The input rows of the output positions `picked` (sorted flat indexes over samples x positions)."""
    if layer.op_type == "matmul_v2":
        return paddle.to_tensor(inputs.reshape(-1, inputs.shape[-1])[picked])
    kernel = tuple(weight_shape[2:])
    per_sample = positions(layer, inputs[:1], weight_shape)
    found = []
    with paddle.no_grad():
        for start in range(0, len(inputs), CHUNK):
            low, high = start * per_sample, min(start + CHUNK, len(inputs)) * per_sample
            inside = picked[(picked >= low) & (picked < high)] - low
            if len(inside):
                patches = _unfolded(layer, paddle.to_tensor(inputs[start:start + CHUNK]), kernel)
                found.append(paddle.gather(patches, paddle.to_tensor(inside)))
    return paddle.concat(found)


def product(layer: Layer, rows: paddle.Tensor, weight: paddle.Tensor) -> paddle.Tensor:
    """The layer's output at the positions of `rows`: (positions, output channels)."""
    if layer.op_type == "matmul_v2":
        return paddle.matmul(rows, weight, transpose_y=layer.attrs.get("trans_y", False))
    groups = layer.attrs["groups"] or 1
    out_channels = weight.shape[0]
    per_group = rows.reshape([rows.shape[0], groups, -1]).transpose([1, 0, 2])  # (groups, positions, patch)
    grouped = weight.reshape([groups, out_channels // groups, -1]).transpose([0, 2, 1])  # (groups, patch, out)
    return paddle.bmm(per_group, grouped).transpose([1, 0, 2]).reshape([rows.shape[0], out_channels])
