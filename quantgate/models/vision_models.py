"""Networks from paddle.vision.models by name, and user networks by `package.module:factory` entry point."""

from __future__ import annotations

import importlib
import inspect

import paddle.vision.models as vision_models
from paddle import nn

from quantgate.models.errors import ModelError


def vision_model_names() -> list[str]:
    """Factory functions of paddle.vision.models (resnet18, mobilenet_v2, ...), lowercase by Paddle's convention."""
    return sorted(name for name in vision_models.__all__ if name.islower() and callable(getattr(vision_models, name)))


def _call_with_supported(factory, architecture: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Layer:
    """Call `factory` with num_classes, and input_shape if it takes it (or **kwargs)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    kwargs = {"num_classes": num_classes}
    if "input_shape" in parameters:
        kwargs["input_shape"] = tuple(input_shape)
    if "num_classes" not in parameters and not takes_kwargs:
        raise ModelError(f"{architecture} does not take num_classes; a factory must accept num_classes=<int> "
                         "(and may accept input_shape=(C, H, W))")
    try:
        model = factory(**kwargs)
    except Exception as exc:  # user code: any failure is reported with the entry point named
        raise ModelError(f"{architecture}(**{kwargs}) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Layer):
        raise ModelError(f"{architecture} returned {type(model).__name__}, not a paddle.nn.Layer")
    return model


def build_vision_model(architecture: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Layer:
    """A paddle.vision.models network (random init, never downloaded weights) or a user entry point.

    Raises:
        ModelError: the name is unknown, the entry point cannot be imported, or the factory fails.
    """
    if ":" in architecture:
        module_name, _, attribute = architecture.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except ImportError as exc:
            raise ModelError(f"train.architecture={architecture!r}: cannot import {module_name!r} ({exc}); "
                             "install the package or add its folder to PYTHONPATH") from exc
        except AttributeError as exc:
            raise ModelError(f"train.architecture={architecture!r}: module {module_name!r} has no {attribute!r}") from exc
        return _call_with_supported(factory, architecture, num_classes, input_shape)
    if architecture not in vision_model_names():
        raise ModelError(f"unknown train.architecture {architecture!r}; use 'digits_cnn', 'crnn' (text), one of "
                         f"paddle.vision.models {vision_model_names()}, or 'package.module:factory'")
    if input_shape[0] != 3:
        raise ModelError(f"{architecture} takes 3-channel RGB input, the data has {input_shape[0]} channel(s); "
                         "set data.transforms.color: rgb")
    return _call_with_supported(getattr(vision_models, architecture), architecture, num_classes, input_shape)
