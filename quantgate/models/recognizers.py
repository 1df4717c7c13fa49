"""The built-in text-line recognizer: a CRNN (ResNet-style convolutions, a sequence neck, a linear CTC head).

The backbone halves the height and width twice, then only the height (for lines 32 pixels high or
more, the width once more), so a line image [C, H, W] becomes T = W/4 columns of features, or W/8
from H = 32. Lines are resized to height H keeping their aspect ratio, so a character is about H/2 to
H pixels wide and spans a handful of frames either way: enough for CTC to emit it, a blank and the
next one. Measured on digit_strings at [1, 32, 320] (1,100 training lines, 10 epochs): with W/4, 8
frames per digit, CTC reached 8.5 % line accuracy; with W/8, 87 %, and each step was faster. The
neck mixes each column with its neighbours, and a linear head scores every column over the
dictionary plus the CTC blank (index 0).

Two necks (`train.neck`): 'conv', two 1x3 convolutions over the columns, which PaddleSlim quantizes
and onnxruntime runs with integer kernels like the backbone; and 'bilstm', a bidirectional LSTM,
which PaddleSlim does not quantize, so it stays float between the INT8 backbone and head.
"""

from __future__ import annotations

import paddle
from paddle import nn

NECKS = ("conv", "bilstm")
WIDTHS = (16, 32, 48, 64)  # stem, then the three residual stages
LSTM_HIDDEN = 64  # per direction
WIDE_HEIGHT = 32  # from this line height on, the backbone halves the width once more (see width_stride)


def _conv_bn(in_channels: int, out_channels: int, kernel_size, stride=1, padding=0) -> list[nn.Layer]:
    return [nn.Conv2D(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias_attr=False),
            nn.BatchNorm2D(out_channels)]


class BasicBlock(nn.Layer):
    """ResNet's basic block: two 3x3 conv + BatchNorm, with a 1x1 projection when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, stride: tuple[int, int]):
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(in_channels, out_channels, 3, stride, 1), nn.ReLU(),
                                  *_conv_bn(out_channels, out_channels, 3, 1, 1))
        changes = in_channels != out_channels or tuple(stride) != (1, 1)
        self.shortcut = nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride)) if changes else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def _stride2_size(size: int) -> int:
    """Output size of a 3x3 convolution with padding 1 and stride 2."""
    return (size - 1) // 2 + 1


def backbone_height(height: int) -> int:
    """The feature height the backbone leaves for an input of `height` rows (before the final pooling)."""
    for _ in range(4):  # the stem, then the three residual stages
        height = _stride2_size(height)
    return height


class ConvNeck(nn.Layer):
    """Two 1x3 convolutions over the feature columns [N, C, 1, T]: each column sees its 2 neighbours either side."""

    def __init__(self, channels: int):
        super().__init__()
        self.layers = nn.Sequential(*_conv_bn(channels, channels, (1, 3), 1, (0, 1)), nn.ReLU(),
                                    *_conv_bn(channels, channels, (1, 3), 1, (0, 1)), nn.ReLU())
        self.out_channels = channels

    def forward(self, columns):
        return paddle.transpose(paddle.squeeze(self.layers(columns), axis=2), [0, 2, 1])  # [N, T, C]


class BiLSTMNeck(nn.Layer):
    """A bidirectional LSTM over the feature columns: each column sees the whole line."""

    def __init__(self, channels: int, hidden: int = LSTM_HIDDEN):
        super().__init__()
        self.lstm = nn.LSTM(channels, hidden, direction="bidirect")
        # Paddle 3.3 allocates the LSTM's dropout-state buffer only when dropout runs; paddle.jit.save of a
        # never-allocated buffer fails ("Unknown place type: Place(undefined:0)"). A 1-byte buffer exports,
        # and with dropout 0 the rnn operator never reads it.
        self.lstm._dropout_state = paddle.zeros([1], dtype="uint8")
        self.out_channels = 2 * hidden

    def forward(self, columns):
        sequence = paddle.transpose(paddle.squeeze(columns, axis=2), [0, 2, 1])  # [N, T, C]
        outputs, _ = self.lstm(sequence)
        return outputs


def width_stride(height: int) -> int:
    """How many input columns make one output frame: 4 for lines under 32 pixels high, else 8."""
    return 8 if height >= WIDE_HEIGHT else 4


class CRNN(nn.Layer):
    """[N, C, H, W] line images -> [N, W / width_stride(H), num_classes] CTC logits (blank = index 0)."""

    def __init__(self, num_classes: int, in_channels: int = 1, image_size: tuple[int, int] = (32, 320),
                 neck: str = "conv"):
        super().__init__()
        height, width = image_size
        if height < 16 or width < width_stride(height):
            raise ValueError(f"crnn needs line images at least 16 pixels high and {width_stride(height)} wide, "
                             f"got {height}x{width}")
        if neck not in NECKS:
            raise ValueError(f"unknown crnn neck {neck!r}; use one of {NECKS}")
        stem, *stages = WIDTHS
        self.backbone = nn.Sequential(
            *_conv_bn(in_channels, stem, 3, 2, 1), nn.ReLU(),
            BasicBlock(stem, stages[0], (2, 2)),
            BasicBlock(stages[0], stages[1], (2, 1)),
            BasicBlock(stages[1], stages[2], (2, 2 if width_stride(height) == 8 else 1)),
        )
        left = backbone_height(height)
        if left > 1:  # what height is left, collapsed to 1
            self.backbone.add_sublayer("collapse_height", nn.MaxPool2D((left, 1)))
        self.neck = ConvNeck(stages[2]) if neck == "conv" else BiLSTMNeck(stages[2])
        self.head = nn.Linear(self.neck.out_channels, num_classes)

    def forward(self, x):
        return self.head(self.neck(self.backbone(x)))
