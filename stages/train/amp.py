"""Paddle automatic mixed precision: set-up, what actually happened, and the float32 master weights.

Paddle AMP only acts on CUDA, XPU and custom devices. On a CPU place `auto_cast` warns and
computes float32, `GradScaler` disables itself and `decorate(level='O2')` keeps float32
parameters. The training code is the same on every device; `AmpRecord` says what was asked
for and what was measured, so an artifact never claims a speed-up that did not happen.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import paddle

from quantgate.config import AmpConfig

LOW_PRECISION = {paddle.float16, paddle.bfloat16}
AMP_PLACES = ("gpu", "xpu")


@dataclass(frozen=True)
class AmpRecord:
    """What was requested and what was measured in the first training step."""

    requested: dict
    effective: bool
    reason: str
    device: str
    scaler_enabled: bool
    low_precision_layer_outputs: int
    layer_outputs: int
    weights_source: str = "parameters"
    task_black_list: tuple[str, ...] = ()  # ops the task keeps float32 on top of the config's (the CTC loss)

    def as_dict(self) -> dict:
        return {**asdict(self), "task_black_list": list(self.task_black_list)}


def device_supports(dtype: str) -> bool:
    """Whether the current place can run `dtype` under auto_cast (always False on CPU)."""
    device = paddle.get_device()
    if not device.startswith(AMP_PLACES) and not paddle.is_compiled_with_custom_device(device.split(":")[0]):
        return False
    if dtype == "bfloat16":
        return bool(paddle.amp.is_bfloat16_supported())
    return bool(paddle.amp.is_float16_supported())


def decorate(model, optimizer, amp: AmpConfig):
    """Apply O2 decoration: low-precision parameters, float32 master weights kept by the optimizer."""
    if not amp.enabled or amp.level != "O2":
        return model, optimizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the CPU no-op warning; AmpRecord reports it
        return paddle.amp.decorate(
            models=model,
            optimizers=optimizer,
            level="O2",
            dtype=amp.dtype,
            master_weight=True,
            save_dtype="float32",
        )


def grad_scaler(amp: AmpConfig) -> paddle.amp.GradScaler:
    """A GradScaler with the configured dynamic loss scaling (Paddle disables it off-GPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return paddle.amp.GradScaler(
            enable=amp.enabled,
            init_loss_scaling=amp.init_loss_scaling,
            incr_ratio=amp.incr_ratio,
            decr_ratio=amp.decr_ratio,
            incr_every_n_steps=amp.incr_every_n_steps,
            decr_every_n_nan_or_inf=amp.decr_every_n_nan_or_inf,
            use_dynamic_loss_scaling=amp.use_dynamic_loss_scaling,
        )


@contextmanager
def autocast(amp: AmpConfig, float32_ops: tuple[str, ...] = ()):
    """paddle.amp.auto_cast with the configured level, dtype and op lists; `float32_ops` (the task's loss
    operators) join the black list and leave the white list, whatever the config says."""
    black_list = set(amp.custom_black_list) | set(float32_ops)
    white_list = set(amp.custom_white_list) - set(float32_ops)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with paddle.amp.auto_cast(
            enable=amp.enabled,
            custom_white_list=white_list or None,
            custom_black_list=black_list or None,
            level=amp.level,
            dtype=amp.dtype,
        ):
            yield


def loss_scale(scaler: paddle.amp.GradScaler) -> float:
    """The loss scale in force; a disabled scaler multiplies by 1."""
    state = scaler.state_dict()
    if not state:
        return 1.0
    return float(np.asarray(state["scale"]).reshape(-1)[0])


class OutputDtypeProbe:
    """Counts how many sublayer outputs are low precision during one forward pass."""

    def __init__(self, model: paddle.nn.Layer):
        self.low_precision = 0
        self.total = 0
        leaves = [layer for layer in model.sublayers() if not layer.sublayers()]
        self._hooks = [layer.register_forward_post_hook(self._count) for layer in leaves]

    def _count(self, layer, inputs, output):
        if isinstance(output, paddle.Tensor):
            self.total += 1
            self.low_precision += int(output.dtype in LOW_PRECISION)

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def amp_record(amp: AmpConfig, scaler: paddle.amp.GradScaler, probe: OutputDtypeProbe,
               task_black_list: tuple[str, ...] = ()) -> AmpRecord:
    """Compare the request with what the first step measured, and say why they differ; `task_black_list`:
    the ops `autocast` kept float32 for the task."""
    device = paddle.get_device()
    effective = amp.enabled and probe.low_precision > 0
    if not amp.enabled:
        reason = "AMP disabled in the config (train.amp.enabled=false); trained in float32."
    elif effective:
        reason = f"{probe.low_precision} of {probe.total} layer outputs computed in {amp.dtype} on {device}."
    elif not device_supports(amp.dtype):
        reason = (
            f"Paddle AMP runs only on CUDA, XPU and custom devices, and {amp.dtype} must be supported there; "
            f"this run's place is {device}, so auto_cast computed float32 and "
            f"GradScaler was {'enabled' if scaler.is_enable() else 'disabled'}"
            + (", and O2 kept float32 parameters." if amp.level == "O2" else ".")
        )
    else:
        reason = (
            f"no layer output was {amp.dtype} on {device}: the custom black list or the model's ops kept "
            "every layer in float32."
        )
    return AmpRecord(
        requested=amp.model_dump(mode="json"),
        effective=effective,
        reason=reason,
        device=device,
        scaler_enabled=bool(scaler.is_enable()),
        low_precision_layer_outputs=probe.low_precision,
        layer_outputs=probe.total,
        task_black_list=tuple(sorted(task_black_list)),
    )


def float32_state(model: paddle.nn.Layer, optimizer) -> tuple[dict[str, np.ndarray], str]:
    """The weights to ship, as float32 arrays keyed by structured name, and where they came from.

    With O2 the optimizer holds float32 master copies of the low-precision parameters; those
    are the trained weights, the low-precision parameters are only their rounded shadows.
    """
    masters = optimizer.state_dict().get("master_weights") or {}
    by_param_name = {param.name: structured for structured, param in model.named_parameters()}
    state = {name: tensor.astype("float32").numpy() for name, tensor in model.state_dict().items()}
    from_masters = 0
    for param_name, master in masters.items():
        structured = by_param_name.get(param_name)
        if structured is not None:
            state[structured] = np.asarray(master.numpy(), dtype=np.float32)
            from_masters += 1
    source = "optimizer_master_weights" if from_masters else "parameters_float32"
    return state, source
