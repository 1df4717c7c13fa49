"""Network architectures the pipeline can train, by name."""

from __future__ import annotations

import paddle
from paddle import nn


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


def build_model(architecture: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Layer:
    """Instantiate `architecture` for inputs of shape (C, H, W): a built-in network, a paddle.vision.models
    name, or a user network's `package.module:factory`.

    Raises:
        ModelError: the architecture cannot be built.
    """
    channels, height, width = input_shape
    if architecture in ARCHITECTURES:
        return ARCHITECTURES[architecture](num_classes=num_classes, in_channels=channels, image_size=(height, width))
    from quantgate.stages.train.vision_models import build_vision_model  # paddle.vision loads only when asked for

    return build_vision_model(architecture, num_classes, tuple(input_shape))
