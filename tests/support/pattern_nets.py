"""Tiny real Paddle networks, one per pattern of PP-OCRv4's recognizer, quantized by PaddleSlim and converted by paddle2onnx.

    model = pattern_model("lab_hardswish", tmp_path)   # -> PatternModel(raw_onnx, paddle_prefix, inputs)

Patterns (each as PP-LCNetV3 / SVTR write it):
  lab_hardswish  conv -> learnable affine (scale * x + bias) -> HardSwish -> learnable affine -> conv, twice
  lab_padded     the same once, the last affine read by a padded 3x3 conv
  se_block       depthwise conv -> HardSwish -> squeeze-and-excitation (pool, conv, ReLU, conv, HardSigmoid, multiply)
  layernorm      conv -> tokens -> LayerNorm -> linear
  lab_residual   conv -> BatchNorm -> affine -> HardSwish -> affine -> padded conv -> BatchNorm, plus the block's
                 input (a residual Add), then HardSwish -> affine -> 1x1 conv (what the FP32 fall-back groups revert)
  attention      tokens -> qkv linear -> softmax(q k^T / sqrt(d)) v -> projection, with a residual

The network is saved by paddle.jit.save in a subprocess (legacy program format, as PaddleOCR's models
are), calibrated by PaddleSlim's quant_post_static (hist) on seeded inputs, and converted by the
convert stage's paddle2onnx call, so the lowering sees what it sees in the pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAPE = (3, 16, 32)

NETS = r'''
import sys, paddle
import paddle.nn as nn
import paddle.nn.functional as F
paddle.seed(int(sys.argv[3]))

class Affine(nn.Layer):  # PP-LCNetV3's LearnableAffineBlock
    def __init__(self, scale, bias):
        super().__init__()
        self.scale = self.create_parameter([1], default_initializer=nn.initializer.Constant(scale))
        self.bias = self.create_parameter([1], default_initializer=nn.initializer.Constant(bias))
    def forward(self, x):
        return self.scale * x + self.bias

class LabHardswish(nn.Layer):
    def __init__(self):
        super().__init__()
        self.convs = nn.LayerList([nn.Conv2D(3, 16, 3, padding=1), nn.Conv2D(16, 16, 3, padding=1, groups=16),
                                   nn.Conv2D(16, 16, 1)])
        self.before = nn.LayerList([Affine(1.7, 0.4), Affine(2.2, -0.3)])
        self.after = nn.LayerList([Affine(0.6, 1e-5), Affine(0.3, -0.2)])  # b ~ 0, as most of PP-LCNetV3's
    def forward(self, x):
        x = self.convs[0](x)
        for index in range(2):
            x = self.after[index](F.hardswish(self.before[index](x)))
            x = self.convs[index + 1](x)
        return paddle.flatten(F.adaptive_avg_pool2d(x, 1), 1)

class LabPadded(nn.Layer):  # the affine after HardSwish read by a padded (3x3) convolution
    def __init__(self):
        super().__init__()
        self.convs = nn.LayerList([nn.Conv2D(3, 16, 3, padding=1), nn.Conv2D(16, 16, 3, padding=1)])
        self.before, self.after = Affine(1.7, 0.4), Affine(0.3, -0.2)
    def forward(self, x):
        x = self.convs[1](self.after(F.hardswish(self.before(self.convs[0](x)))))
        return paddle.flatten(F.adaptive_avg_pool2d(x, 1), 1)

class SeBlock(nn.Layer):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2D(3, 16, 3, padding=1)
        self.dw = nn.Conv2D(16, 16, 3, padding=1, groups=16)
        self.squeeze = nn.Conv2D(16, 4, 1)
        self.excite = nn.Conv2D(4, 16, 1)
        self.pw = nn.Conv2D(16, 8, 1)
    def forward(self, x):
        x = F.hardswish(self.dw(self.stem(x)))
        se = F.hardsigmoid(self.excite(F.relu(self.squeeze(F.adaptive_avg_pool2d(x, 1)))))
        return paddle.flatten(F.adaptive_avg_pool2d(self.pw(x * se), 1), 1)

class LabResidual(nn.Layer):
    def __init__(self):
        super().__init__()
        self.stem, self.stem_bn = nn.Conv2D(3, 16, 3, padding=1), nn.BatchNorm2D(16)
        self.conv, self.bn = nn.Conv2D(16, 16, 3, padding=1), nn.BatchNorm2D(16)
        self.head = nn.Conv2D(16, 8, 1)
        self.before, self.after = Affine(1.7, 0.4), Affine(0.3, -0.2)
        self.last = Affine(0.8, 0.1)
    def forward(self, x):
        x = self.stem_bn(self.stem(x))
        x = x + self.bn(self.conv(self.after(F.hardswish(self.before(x)))))
        x = self.head(self.last(F.hardswish(x)))
        return paddle.flatten(F.adaptive_avg_pool2d(x, 1), 1)

class Norm(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 32, 3, stride=(16, 1), padding=1)
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 10)
    def forward(self, x):
        tokens = paddle.transpose(paddle.flatten(self.conv(x), 2), [0, 2, 1])
        return self.fc(self.norm(tokens))

class Attention(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(3, 32, 3, stride=(16, 1), padding=1)
        self.qkv = nn.Linear(32, 96)
        self.proj = nn.Linear(32, 32)
        self.fc = nn.Linear(32, 10)
    def forward(self, x):
        tokens = paddle.transpose(paddle.flatten(self.conv(x), 2), [0, 2, 1])
        qkv = paddle.reshape(self.qkv(tokens), [0, -1, 3, 32])
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        # paddle.mm: matmul_v2 in a legacy program (paddle.matmul is PIR-only in Paddle 3)
        attention = F.softmax(paddle.mm(q, paddle.transpose(k, [0, 2, 1])) * (32 ** -0.5), axis=-1)
        return self.fc(tokens + self.proj(paddle.mm(attention, v)))

NET = {"lab_hardswish": LabHardswish, "lab_padded": LabPadded, "se_block": SeBlock, "lab_residual": LabResidual, "layernorm": Norm, "attention": Attention}[sys.argv[2]]()
NET.eval()
paddle.jit.save(NET, sys.argv[1] + "/inference",
                input_spec=[paddle.static.InputSpec([None, SHAPE[0], SHAPE[1], SHAPE[2]], "float32", "x")])
'''.replace("SHAPE[0], SHAPE[1], SHAPE[2]", ", ".join(map(str, SHAPE)))

PATTERNS = ("lab_hardswish", "lab_padded", "se_block", "layernorm", "attention")  # lab_residual: the fall-back tests


@dataclass(frozen=True)
class PatternModel:
    raw_onnx: Path  # paddle2onnx's INT8 model of PaddleSlim's program
    paddle_prefix: Path  # PaddleSlim's INT8 program (for the lowering's program scales)
    fp32_onnx: Path
    inputs: np.ndarray  # held-out inputs, not calibrated on


def inputs(count: int, seed: int) -> np.ndarray:
    """Smooth random images in [-1, 1] (a real image's statistics more than white noise)."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(-1, 1, (count, SHAPE[0], SHAPE[1] // 4, SHAPE[2] // 4))
    return np.repeat(np.repeat(coarse, 4, axis=2), 4, axis=3).astype(np.float32) + \
        rng.normal(0, 0.05, (count, *SHAPE)).astype(np.float32)


def pattern_model(pattern: str, folder: Path, seed: int = 0, skip: tuple[str, ...] = ()) -> PatternModel:
    """Build, quantize (PaddleSlim hist, 4 batches of 16) and convert the network of `pattern` under `folder`;
    `skip`: weight names PaddleSlim leaves in FP32 (its skip_tensor_list, as the search's fall-backs)."""
    import paddle
    from paddleslim.quant import quant_post_static

    from quantgate.int8.onnx_conversion import to_onnx
    from quantgate.int8.static_graph import static_mode

    fp32, int8 = folder / "fp32", folder / "int8"
    fp32.mkdir(parents=True)
    script = folder / "net.py"  # a file: paddle.jit.save reads the layer's source to trace it
    script.write_text(NETS)
    subprocess.run([sys.executable, str(script), str(fp32), pattern, str(seed)], check=True, capture_output=True,
                   env={**os.environ, "FLAGS_enable_pir_api": "0"})
    calibration = inputs(64, seed + 1)
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            quant_post_static(
                executor=paddle.static.Executor(paddle.CPUPlace()), model_dir=str(fp32), quantize_model_path=str(int8),
                data_loader=lambda: ({"x": calibration[start:start + 16]} for start in range(0, 64, 16)),
                model_filename="inference.pdmodel", params_filename="inference.pdiparams",
                save_model_filename="model.pdmodel", save_params_filename="model.pdiparams",
                batch_size=16, batch_nums=4, scope=scope, algo="hist", onnx_format=True,
                skip_tensor_list=list(skip) or None)
    to_onnx(int8 / "model.pdmodel", int8 / "model.pdiparams", folder / "raw.onnx")
    to_onnx(fp32 / "inference.pdmodel", fp32 / "inference.pdiparams", folder / "fp32.onnx")
    return PatternModel(folder / "raw.onnx", int8 / "model", folder / "fp32.onnx", inputs(32, seed + 2))


def pattern_models(folders) -> Callable[[str], PatternModel]:
    """`pattern_model` of each pattern asked for, built once in a new folder of `folders` (pytest's
    tmp_path_factory): what a module-scoped fixture returns, so a module's tests build each network once."""
    built: dict[str, PatternModel] = {}

    def get(pattern: str) -> PatternModel:
        if pattern not in built:
            built[pattern] = pattern_model(pattern, folders.mktemp(pattern))
        return built[pattern]
    return get
