"""AdaRound's steps see a layer as a product over sampled output positions: it must be the layer's own output at
those positions, for convs (grouped, depthwise, strided, padded unevenly, dilated) and matmuls."""

import numpy as np
import paddle
import pytest

from quantgate.stages.quantize.adaround import _apply, dynamic_mode
from quantgate.stages.quantize.quantized_weights import Layer
from quantgate.stages.quantize.unfolded import positions, product, rows, supported


def layer(op_type: str, **attrs) -> Layer:
    return Layer(op_type, attrs, "x.int8", "x", "out", "w", "w.scale", 0, 127, None, op_type == "depthwise_conv2d")


CONVS = [
    ("conv2d", (8, 3, 3, 3), dict(strides=[1, 1], paddings=[1, 1], dilations=[1, 1], groups=1)),
    ("conv2d", (12, 4, 3, 3), dict(strides=[2, 1], paddings=[0, 1, 1, 2], dilations=[1, 1], groups=2)),
    ("depthwise_conv2d", (8, 1, 3, 3), dict(strides=[2, 2], paddings=[1, 1], dilations=[1, 1], groups=8)),
    ("conv2d", (6, 8, 3, 3), dict(strides=[1, 1], paddings=[2, 2], dilations=[2, 2], groups=1)),
    ("conv2d", (16, 8, 1, 1), dict(strides=[1, 1], paddings=[0, 0], dilations=[1, 1], groups=1)),
]


@pytest.mark.parametrize(("op_type", "shape", "attrs"), CONVS, ids=lambda value: str(value))
def test_a_convs_output_at_sampled_positions_is_the_product_of_its_unfolded_rows(op_type, shape, attrs):
    rng = np.random.default_rng(0)
    conv = layer(op_type, **attrs)
    channels = shape[1] * attrs["groups"]
    inputs = rng.standard_normal((11, channels, 9, 13)).astype(np.float32)  # 11: a chunk and a part
    weight = rng.standard_normal(shape).astype(np.float32)
    assert supported(conv)
    with dynamic_mode(), paddle.no_grad():
        full = _apply(conv, paddle.to_tensor(inputs), paddle.to_tensor(weight)).numpy()  # (N, C, H, W)
        flat = full.transpose(0, 2, 3, 1).reshape(-1, shape[0])  # sample-major, then row-major pixels
        assert positions(conv, inputs, shape) == len(flat)
        picked = np.sort(rng.choice(len(flat), 200, replace=False))
        ours = product(conv, rows(conv, inputs, picked, shape), paddle.to_tensor(weight)).numpy()
    np.testing.assert_allclose(ours, flat[picked], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("trans_y", [False, True])
def test_a_matmuls_output_at_sampled_rows_is_the_product_of_those_rows(trans_y):
    rng = np.random.default_rng(1)
    matmul = layer("matmul_v2", trans_x=False, trans_y=trans_y)
    inputs = rng.standard_normal((5, 7, 12)).astype(np.float32)
    weight = rng.standard_normal((10, 12) if trans_y else (12, 10)).astype(np.float32)
    with dynamic_mode(), paddle.no_grad():
        full = _apply(matmul, paddle.to_tensor(inputs), paddle.to_tensor(weight)).numpy().reshape(-1, 10)
        picked = np.sort(rng.choice(len(full), 20, replace=False))
        ours = product(matmul, rows(matmul, inputs, picked, weight.shape), paddle.to_tensor(weight)).numpy()
    assert positions(matmul, inputs, weight.shape) == 35
    np.testing.assert_allclose(ours, full[picked], rtol=1e-5, atol=1e-5)


def test_layers_it_cannot_unfold_are_told_apart():
    assert not supported(layer("conv2d", strides=[1, 1], paddings=[0, 0], dilations=[1, 1], groups=1,
                               padding_algorithm="SAME"))
    assert not supported(layer("matmul_v2", trans_x=True, trans_y=False))
