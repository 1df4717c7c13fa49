"""AdaRound's steps on sampled output positions, in numpy with the gradient written out.

Each step of `adaround.refit_layer` is a handful of array operations (soft rounding, one product per group, the
error, its gradient through the product and the rounding, Adam). In Paddle's dynamic graph they were ~25 op
dispatches forward and backward, which cost more than the arithmetic on 2 cores (docs/benchmarks.md, "Recovery's
time"); here they are numpy calls on float32 arrays, the products in BLAS. The loss and the update are Paddle's:
BRECQ's reconstruction error weighted per channel, AdaRound's annealed regularizer, and `paddle.optimizer.Adam`'s
update with its defaults (tests/stages/test_adaround_steps.py compares a step with Paddle's autograd and optimizer).

Weights are held as (groups, patch, outputs per group) matrices, the layout of `unfolded`'s rows by group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ADAM = (1e-3, 0.9, 0.999, 1e-8)  # learning rate, beta1, beta2, epsilon: paddle.optimizer.Adam's defaults


@dataclass(frozen=True)
class Grouping:
    """How a layer's weight maps to (groups, patch, outputs per group) matrices."""

    shape: tuple[int, ...]  # the weight as the program holds it
    groups: int
    transposed: bool  # a matmul weight held (outputs, inputs)
    conv: bool

    def to_matrices(self, array: np.ndarray) -> np.ndarray:
        array = np.broadcast_to(array, self.shape)
        if not self.conv:
            matrix = array.T if self.transposed else array
            return np.ascontiguousarray(matrix[None], dtype=np.float32)
        outputs = self.shape[0]
        grouped = array.reshape(self.groups, outputs // self.groups, -1)  # (groups, outputs, patch)
        return np.ascontiguousarray(grouped.transpose(0, 2, 1), dtype=np.float32)

    def from_matrices(self, matrices: np.ndarray) -> np.ndarray:
        if not self.conv:
            matrix = matrices[0]
            return np.ascontiguousarray(matrix.T if self.transposed else matrix)
        return np.ascontiguousarray(matrices.transpose(0, 2, 1)).reshape(self.shape)

    def grouped_rows(self, rows: np.ndarray) -> np.ndarray:
        """(positions, groups * patch) rows as (positions, groups, patch): drawing positions stays contiguous."""
        return rows.reshape(rows.shape[0], self.groups, -1)

    def grouped_outputs(self, outputs: np.ndarray) -> np.ndarray:
        """(positions, channels) outputs as (positions, groups, outputs per group)."""
        return outputs.reshape(outputs.shape[0], self.groups, -1)


def _product(rows: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """(positions, groups, patch) rows times (groups, patch, outputs) weights: (positions, groups, outputs). One
    GEMM for one group; a depthwise layer's one output per group as an element-wise sum."""
    if weight.shape[0] == 1:
        return (rows[:, 0] @ weight[0])[:, None]
    if weight.shape[2] == 1:
        return np.einsum("pgk,gk->pg", rows, weight[:, :, 0])[:, :, None]
    return np.einsum("pgk,gko->pgo", rows, weight)


def _weight_gradient(rows: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """The gradient of sum(outputs * _product(rows, W)) in W: (groups, patch, outputs)."""
    if outputs.shape[1] == 1:
        return (rows[:, 0].T @ outputs[:, 0])[None]
    if outputs.shape[2] == 1:
        return np.einsum("pgk,pg->gk", rows, outputs[:, :, 0])[:, :, None]
    return np.einsum("pgk,pgo->gko", rows, outputs)


@dataclass
class SoftRounding:
    """The state of one layer's fit: V (the rounding's logits), Adam's moments and step count."""

    v: np.ndarray
    first: np.ndarray
    second: np.ndarray
    steps: int = 0

    @classmethod
    def start(cls, v: np.ndarray) -> SoftRounding:
        return cls(v.astype(np.float32), np.zeros_like(v, np.float32), np.zeros_like(v, np.float32))


def soft(v: np.ndarray, zeta: float, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(h(V), sigmoid(V)): the rectified sigmoid in [0, 1] AdaRound rounds up by."""
    sigmoid = 1 / (1 + np.exp(-v))
    return np.clip(sigmoid * (zeta - gamma) + gamma, 0, 1), sigmoid


def step(state: SoftRounding, rows: np.ndarray, target: np.ndarray, floor: np.ndarray, grid: np.ndarray,
         low: float, high: float, gain: np.ndarray | None, regularization: float, beta: float | None,
         zeta: float, gamma: float) -> float:
    """One Adam step on `rows` (positions, groups, patch) against `target` (positions, groups, outputs); every
    weight array in matrix layout. `beta` None: no regularizer (the warm-up). Returns the step's loss."""
    h, sigmoid = soft(state.v, zeta, gamma)
    rounded = floor + h
    inside = (rounded >= low) & (rounded <= high)
    weight = np.clip(rounded, low, high) * grid
    residual = _product(rows, weight) - target  # (positions, groups, outputs)
    weighted = residual if gain is None else residual * gain
    positions = rows.shape[0]
    loss = float((weighted * residual).sum() / positions)
    gradient = _weight_gradient(rows, weighted) * (2 / positions) * grid * inside  # d loss / d h
    return _regularized_update(state, loss, gradient, h, sigmoid, regularization, beta, zeta, gamma)


def _regularized_update(state: SoftRounding, loss: float, gradient: np.ndarray, h: np.ndarray, sigmoid: np.ndarray,
                        regularization: float, beta: float | None, zeta: float, gamma: float) -> float:
    """Add the rounding regularizer to the reconstruction's `loss` and its `gradient` in h, carry the gradient
    through the rectified sigmoid to V, and take Adam's step. Returns the whole loss."""
    if beta is not None:
        tilt = 2 * h - 1
        magnitude = np.abs(tilt)
        loss += float(regularization * (1 - magnitude ** beta).sum())
        gradient -= regularization * beta * 2 * np.sign(tilt) * magnitude ** (beta - 1)
    unclipped = sigmoid * (zeta - gamma) + gamma
    gradient *= ((unclipped >= 0) & (unclipped <= 1)) * (zeta - gamma) * sigmoid * (1 - sigmoid)
    _adam(state, gradient.astype(np.float32, copy=False))
    return loss


def _adam(state: SoftRounding, gradient: np.ndarray) -> None:
    rate, beta1, beta2, epsilon = ADAM
    state.steps += 1
    state.first *= beta1
    state.first += (1 - beta1) * gradient
    state.second *= beta2
    state.second += (1 - beta2) * gradient * gradient
    bias2 = np.sqrt(1 - beta2 ** state.steps)
    state.v -= (rate * bias2 / (1 - beta1 ** state.steps)) * state.first / (np.sqrt(state.second) + epsilon * bias2)


@dataclass(frozen=True)
class Quadratic:
    """A layer's reconstruction error over fixed positions as a quadratic in its weight: the error of W is
    sum over channels c of gain_c (w_c' G w_c - 2 b_c' w_c + t_c), with G = X'X / P per group (gram), B = X'T / P
    (cross) and t = |T|^2 / P per channel (constant). A step's cost is then a (patch x patch) by (patch x outputs)
    product per group, whatever the number of positions, and every step sees all of them."""

    gram: np.ndarray  # (groups, patch, patch)
    cross: np.ndarray  # (groups, patch, outputs)
    constant: np.ndarray  # (groups, outputs)

    @classmethod
    def of(cls, rows: np.ndarray, target: np.ndarray) -> Quadratic:
        """From (positions, groups, patch) rows and (positions, groups, outputs) targets."""
        positions = rows.shape[0]
        by_group = rows.transpose(1, 2, 0)  # (groups, patch, positions): batched GEMMs, 9x einsum's speed here
        gram = np.matmul(by_group, rows.transpose(1, 0, 2)) / positions
        cross = np.matmul(by_group, target.transpose(1, 0, 2)) / positions
        return cls(gram.astype(np.float32), cross.astype(np.float32),
                   ((target.astype(np.float64) ** 2).sum(axis=0) / positions).astype(np.float32))


def quadratic_step(state: SoftRounding, quadratic: Quadratic, floor: np.ndarray, grid: np.ndarray, low: float,
                   high: float, gain: np.ndarray | None, regularization: float, beta: float | None, zeta: float,
                   gamma: float) -> float:
    """`step` on every position of `quadratic` at once (the same loss and gradient as `step` given all its rows).
    `gain`: (1, groups, outputs) as for `step`."""
    h, sigmoid = soft(state.v, zeta, gamma)
    rounded = floor + h
    inside = (rounded >= low) & (rounded <= high)
    weight = np.clip(rounded, low, high) * grid
    product = np.matmul(quadratic.gram, weight)  # (groups, patch, outputs)
    per_channel = (weight * (product - 2 * quadratic.cross)).sum(axis=1) + quadratic.constant  # (groups, outputs)
    channel_gain = None if gain is None else gain[0]
    loss = float((per_channel if channel_gain is None else per_channel * channel_gain).sum())
    gradient = 2 * (product - quadratic.cross)
    if channel_gain is not None:
        gradient *= channel_gain[:, None, :]
    gradient *= grid * inside
    return _regularized_update(state, loss, gradient, h, sigmoid, regularization, beta, zeta, gamma)
