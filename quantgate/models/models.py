"""Network architectures the pipeline can train, by name."""

from __future__ import annotations

import numpy as np
import paddle
from paddle import nn

from quantgate.models.errors import ModelError


class DigitsCNN(nn.Layer):
    """A conv + BatchNorm + linear classifier for 8x8 grey images.

    Wide enough (32-64 channels) that convolution dominates onnxruntime's per-call overhead, so the
    INT8 model's integer kernels are measurably faster than FP32; a 16-32 channel version was not.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int | tuple[int, int] = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2D(in_channels, 32, kernel_size=3, padding=1),
            nn.BatchNorm2D(32),
            nn.ReLU(),
            nn.Conv2D(32, 64, kernel_size=3, padding=1),
            nn.BatchNorm2D(64),
            nn.ReLU(),
            nn.Conv2D(64, 64, kernel_size=3, padding=1),
            nn.BatchNorm2D(64),
            nn.ReLU(),
            nn.MaxPool2D(kernel_size=2),
        )
        height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.classifier = nn.Linear(64 * (height // 2) * (width // 2), num_classes)

    def forward(self, x):
        return self.classifier(paddle.flatten(self.features(x), start_axis=1))


ARCHITECTURES = {"digits_cnn": DigitsCNN}
RECOGNIZER = "crnn"  # the built-in text recognizer (see recognizers)
DEFAULT_NECK = "conv"  # the default of train.neck


def build_model(architecture: str, num_classes: int, input_shape: tuple[int, ...],
                neck: str = DEFAULT_NECK) -> nn.Layer:
    """Instantiate `architecture` for inputs of shape (C, H, W): a built-in network, a paddle.vision.models
    name, or a user network's `package.module:factory`. `neck` (train.neck) shapes the built-in 'crnn' only.

    Raises:
        ModelError: the architecture cannot be built.
    """
    channels, height, width = input_shape
    if architecture == RECOGNIZER:
        from quantgate.models.recognizers import CRNN

        try:
            return CRNN(num_classes, channels, (height, width), neck)
        except ValueError as exc:
            raise ModelError(f"train.architecture='crnn': {exc}") from exc
    if architecture in ARCHITECTURES:
        return ARCHITECTURES[architecture](num_classes=num_classes, in_channels=channels, image_size=(height, width))
    from quantgate.models.vision_models import build_vision_model  # paddle.vision loads only when asked for

    return build_vision_model(architecture, num_classes, tuple(input_shape))


def check_text_outputs(model: nn.Layer, architecture: str, num_classes: int, input_shape: tuple[int, ...],
                       max_text_length: int = 0) -> int:
    """Run `model` once on 2 blank line images and check it returns CTC logits [N, T, num_classes] with at
    least `max_text_length` frames (CTC emits at most one character per frame); returns T.

    Raises:
        ModelError: the model fails on the batch, or its output has another shape.
    """
    was_training = model.training
    model.eval()  # BatchNorm's running statistics stay as they are
    try:
        with paddle.no_grad():
            outputs = model(paddle.zeros([2, *input_shape], dtype="float32"))
    except Exception as exc:  # user code: any failure is reported with the architecture named
        raise ModelError(f"train.architecture={architecture!r} failed on a batch of 2 line images of shape "
                         f"{list(input_shape)}: {type(exc).__name__}: {exc}") from exc
    finally:
        if was_training:
            model.train()
    shape = list(outputs.shape) if isinstance(outputs, paddle.Tensor) else type(outputs).__name__
    if not isinstance(outputs, paddle.Tensor) or len(shape) != 3 or shape[0] != 2 or shape[2] != num_classes:
        raise ModelError(
            f"train.architecture={architecture!r} returned {shape} for a batch of 2 line images "
            f"{list(input_shape)}; a text recognizer must return CTC logits [N, T, {num_classes}]: N images, "
            f"T frames, the dictionary's {num_classes - 1} characters plus the blank at index 0"
        )
    if shape[1] < max_text_length:
        raise ModelError(
            f"train.architecture={architecture!r} returns {shape[1]} frames per line, fewer than the longest "
            f"label ({max_text_length} characters); CTC needs a frame per character: widen "
            "data.transforms.rec_image_shape or reduce the model's width stride"
        )
    return int(shape[1])


def load_weights(model: nn.Layer, weights: dict[str, np.ndarray], architecture: str) -> nn.Layer:
    """Set `model`'s state to `weights` (names and shapes must match exactly) and switch it to eval mode.

    Raises:
        ModelError: the weights were saved from another network (another architecture or train.neck).
    """
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    given = {name: list(array.shape) for name, array in weights.items()}
    if expected != given:
        missing, unexpected = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
        reshaped = sorted(name for name in set(expected) & set(given) if expected[name] != given[name])
        raise ModelError(
            f"the weights do not fit train.architecture={architecture!r} as built here (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, other shapes {reshaped[:5]}); were they trained with another "
            "architecture, train.neck or data?"
        )
    model.set_state_dict({name: paddle.to_tensor(array) for name, array in weights.items()})
    model.eval()
    return model
