"""AdaRound's numpy steps are Paddle's: one step's loss and updated rounding logits equal those of Paddle's
autograd and `paddle.optimizer.Adam` on the same positions, for a grouped conv (with a BatchNorm's gain), a
depthwise conv and a transposed matmul, in the warm-up and with the regularizer."""

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from quantgate.stages.quantize import adaround_steps, unfolded
from quantgate.stages.quantize.adaround import GAMMA, REGULARIZATION, ZETA, dynamic_mode
from quantgate.stages.quantize.quantized_weights import Layer

CASES = {
    "grouped conv": ("conv2d", (12, 4, 3, 3), dict(strides=[1, 1], paddings=[1, 1], dilations=[1, 1], groups=2)),
    "depthwise": ("depthwise_conv2d", (6, 1, 3, 3), dict(strides=[1, 1], paddings=[1, 1], dilations=[1, 1],
                                                          groups=6)),
    "matmul": ("matmul_v2", (10, 12), dict(trans_x=False, trans_y=True)),
}


def paddle_step(layer, rows, target, floor, grid, start, gain, beta):
    with dynamic_mode():
        v = paddle.create_parameter(start.shape, "float32", default_initializer=paddle.nn.initializer.Assign(start))
        optimizer = paddle.optimizer.Adam(learning_rate=1e-3, parameters=[v])
        soft = paddle.clip(F.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)
        weight = paddle.clip(paddle.to_tensor(floor) + soft, -128, 127) * paddle.to_tensor(grid)
        squared = (unfolded.product(layer, paddle.to_tensor(rows), weight) - paddle.to_tensor(target)) ** 2
        loss = (squared if gain is None else squared * paddle.to_tensor(gain)).sum(axis=-1).mean()
        if beta is not None:
            loss = loss + REGULARIZATION * (1 - paddle.abs(2 * soft - 1) ** beta).sum()
        loss.backward()
        optimizer.step()
        return float(loss), v.numpy()


@pytest.mark.parametrize("beta", [None, 12.0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_numpy_step_is_paddles_autograd_and_adam(case, beta):
    op_type, shape, attrs = CASES[case]
    rng = np.random.default_rng(3)
    layer = Layer(op_type, attrs, "x", "x", "out", "w", "s", 0, 127, None, op_type == "depthwise_conv2d")
    conv = op_type != "matmul_v2"
    patch = int(np.prod(shape[1:])) * attrs["groups"] if conv else shape[1]
    outputs = shape[0]
    rows = rng.standard_normal((64, patch)).astype(np.float32)
    target = rng.standard_normal((64, outputs)).astype(np.float32)
    grid = np.full(shape, 0.05, np.float32) * (1 + rng.random(shape, dtype=np.float32))
    floor = np.floor(rng.standard_normal(shape) * 20).astype(np.float32)
    start = rng.standard_normal(shape).astype(np.float32)
    gain = rng.random((1, outputs), dtype=np.float32) + 0.5 if case == "grouped conv" else None

    expected_loss, expected_v = paddle_step(layer, rows, target, floor, grid, start, gain, beta)

    grouping = adaround_steps.Grouping(shape, attrs["groups"] if conv else 1, not conv, conv)
    state = adaround_steps.SoftRounding.start(grouping.to_matrices(start))
    loss = adaround_steps.step(state, grouping.grouped_rows(rows), grouping.grouped_outputs(target),
                               grouping.to_matrices(floor), grouping.to_matrices(grid), -128, 127,
                               None if gain is None else grouping.grouped_outputs(gain), REGULARIZATION, beta,
                               ZETA, GAMMA)
    assert loss == pytest.approx(expected_loss, rel=1e-4)
    np.testing.assert_allclose(grouping.from_matrices(state.v), expected_v, rtol=1e-5, atol=1e-6)
    assert np.abs(expected_v - start).max() > 1e-4  # the step moved something


@pytest.mark.parametrize("beta", [None, 12.0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_quadratic_step_is_a_step_over_every_position(case, beta):
    """The error as a quadratic in the weight (Gram matrices of the positions) gives the loss and update of a step
    that draws every position."""
    op_type, shape, attrs = CASES[case]
    rng = np.random.default_rng(4)
    conv = op_type != "matmul_v2"
    patch = int(np.prod(shape[1:])) * attrs["groups"] if conv else shape[1]
    grouping = adaround_steps.Grouping(shape, attrs["groups"] if conv else 1, not conv, conv)
    rows = grouping.grouped_rows(rng.standard_normal((300, patch)).astype(np.float32))
    target = grouping.grouped_outputs(rng.standard_normal((300, shape[0])).astype(np.float32))
    floor = grouping.to_matrices(np.floor(rng.standard_normal(shape) * 20).astype(np.float32))
    grid = grouping.to_matrices(np.full(shape, 0.05, np.float32) * (1 + rng.random(shape, dtype=np.float32)))
    start = grouping.to_matrices(rng.standard_normal(shape).astype(np.float32))
    gain = grouping.grouped_outputs(rng.random((1, shape[0]), dtype=np.float32) + 0.5)
    drawn, summed = adaround_steps.SoftRounding.start(start), adaround_steps.SoftRounding.start(start)
    arguments = (floor, grid, -128, 127, gain, REGULARIZATION, beta, ZETA, GAMMA)
    loss = adaround_steps.step(drawn, rows, target, *arguments)
    assert adaround_steps.quadratic_step(summed, adaround_steps.Quadratic.of(rows, target), *arguments) == \
        pytest.approx(loss, rel=1e-4)
    np.testing.assert_allclose(summed.v, drawn.v, rtol=1e-5, atol=1e-6)
