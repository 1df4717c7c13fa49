"""One optimizer update in Paddle's documented AMP order: unscale, check, clip, step, update.

    scaled loss.backward() -> scaler.unscale_(optimizer) -> measure the true gradients
    -> skip if any is inf/NaN, else clip their global norm -> scaler.step -> scaler.update

Clipping runs on unscaled gradients, so `grad_clip_norm` means the same with and without AMP.
(An optimizer's own `grad_clip=` would also run after the unscale, inside `scaler.step`, but
then the pre- and post-clip norms could not be recorded.)

Whether a step is skipped is decided here, from the unscaled gradients, with public tensor ops:
GradScaler exposes its overflow flag only as a private attribute (`_found_inf`), but its check
(`check_finite_and_unscale`) is exactly "some gradient is inf/NaN", which is what is measured
here. With the scaler enabled, `scaler.step` makes the same decision and skips the update
itself, and `scaler.update` lowers the scale; with it disabled (CPU), this code skips the
update, which Paddle would otherwise apply and so write NaN into the weights.

A skipped step leaves the model as it was: the optimizer does not update the parameters and
the BatchNorm running statistics that the forward pass changed are restored, so one batch with
inf/NaN values cannot poison the shipped weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import paddle


@dataclass(frozen=True)
class StepOutcome:
    skipped: bool
    grad_norm: float
    grad_norm_clipped: float


def global_grad_norm(parameters: list) -> tuple[float, bool]:
    """The L2 norm of all gradients as one vector (in float32), and whether every gradient is finite."""
    grads = [param.grad for param in parameters if param.grad is not None]
    if not grads:
        return 0.0, True
    # float32, so that squaring a float16 gradient cannot overflow the sum
    squares = paddle.stack([paddle.sum(paddle.square(grad.astype("float32"))) for grad in grads])
    finite = paddle.stack([paddle.isfinite(grad).all() for grad in grads]).all()
    return float(paddle.sqrt(squares.sum())), bool(finite)


class BufferSnapshot:
    """Copies of the state a forward pass changes (BatchNorm running statistics), taken before it runs.

    Paddle keeps BatchNorm's `_mean`/`_variance` as non-trainable parameters, not buffers. A buffer that
    holds no memory (an LSTM's `_dropout_state` until dropout runs) has nothing to restore.
    """

    def __init__(self, model: paddle.nn.Layer):
        untrained = [param for param in model.parameters() if param.stop_gradient]
        self._saved = [(tensor, tensor.clone()) for tensor in [*untrained, *model.buffers()]
                       if tensor._is_initialized()]

    def restore(self) -> None:
        for tensor, saved in self._saved:
            tensor.set_value(saved)


@paddle.no_grad()
def clip_global_norm(parameters: list, factor: float) -> None:
    """Scale every gradient in place by `factor` (< 1): ClipGradByGlobalNorm's rule with a float32 norm.

    paddle.nn.utils.clip_grad_norm_ would do the same, but it sums the squares in the gradients'
    dtype, and a float16 sum can overflow to inf and zero every gradient.
    """
    for param in parameters:
        if param.grad is not None:
            param.grad.multiply_(paddle.to_tensor(factor, dtype=param.grad.dtype))


def apply_update(
    scaler: paddle.amp.GradScaler, optimizer, parameters: list, clip_norm: float | None, before: BufferSnapshot
) -> StepOutcome:
    """Unscale, skip on inf/NaN or clip, then step and update the loss scale; gradients must be computed."""
    scaler.unscale_(optimizer)  # a no-op when the scaler is disabled: the gradients are then unscaled already
    norm, finite = global_grad_norm(parameters)
    if not finite:
        if scaler.is_enable():
            scaler.step(optimizer)  # sees the same overflow and skips the update
        scaler.update()  # lowers the loss scale after decr_every_n_nan_or_inf overflows
        before.restore()
        return StepOutcome(True, norm, norm)
    clipped = norm
    if clip_norm is not None and norm > clip_norm:
        clip_global_norm(parameters, clip_norm / norm)
        clipped, _ = global_grad_norm(parameters)
    scaler.step(optimizer)  # the gradients are unscaled already; it will not unscale twice
    scaler.update()
    return StepOutcome(False, norm, clipped)
