"""Equalizing a BatchNorm output for its depthwise conv: PP-LCNetV3's stem, on a tiny real network, through the
quantize stage (PaddleSlim) and Paddle's executor."""

import hashlib
from pathlib import Path

import numpy as np
import paddle
import pytest
from paddle import nn

from quantgate.config import QuantizeConfig
from quantgate.int8.onnx_equalization import MAX_GAIN
from quantgate.int8.static_graph import load_program, static_mode
from quantgate.samples.reading import open_data
from quantgate.stages.quantize import quantize
from tests.stages.test_quantize_streaming import image_folder_and_cnn

CONFIG = QuantizeConfig(strategy="single", batch_size=8)  # the whole calibration split
# The BatchNorm's output channels, as wide apart as the recognizer's stem (0.5 to 29 on real lines).
GAMMA = np.geomspace(0.02, 4.0, 8).astype(np.float32)


class Stem(nn.Layer):
    """conv -> BatchNorm -> depthwise conv (PP-LCNetV3's stem and first block), `between` the last two."""

    def __init__(self, between: nn.Layer, classes: int):
        super().__init__()
        self.conv = nn.Conv2D(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2D(8)
        self.between = between
        self.depthwise = nn.Conv2D(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, classes)
        self.norm.weight.set_value(GAMMA)
        self.norm.bias.set_value((GAMMA * np.linspace(-1, 1, 8)).astype(np.float32))
        # A trained depthwise conv (its own BatchNorm merged in, as in the exported recognizer) brings every
        # channel back to one scale: the narrow channels' weights are the large ones.
        weight = self.depthwise.weight.numpy()
        self.depthwise.weight.set_value((weight / GAMMA.reshape(-1, 1, 1, 1)).astype(np.float32))

    def forward(self, x):
        x = nn.functional.relu(self.depthwise(self.between(self.norm(self.conv(x)))))
        return self.head(paddle.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.fixture(scope="module")
def stems(tmp_path_factory):
    """The image folder's data stage, and the stem saved twice: BN -> dw conv, and BN -> ReLU -> dw conv."""
    root = image_folder_and_cnn(tmp_path_factory.mktemp("equalization"), per_class=40)
    data = open_data(root / "data")
    for name, between in (("direct", nn.Identity()), ("activated", nn.ReLU())):
        paddle.seed(0)
        net = Stem(between, data.num_classes)
        net.eval()
        spec = paddle.static.InputSpec([None, *data.input_shape], "float32", "image")
        paddle.jit.save(net, str(root / name / "model"), input_spec=[spec])
    return root


def quantized(root: Path, model: str, equalize: bool):
    out = root / f"{model}-{'equalized' if equalize else 'plain'}"
    out.mkdir()
    config = CONFIG.model_copy(update={"equalize_depthwise_inputs": equalize})
    return quantize(config, root / model, "model.pdmodel", "model.pdiparams", root / "data", out), out


def int8_error(root: Path, model: str, int8: Path) -> float:
    """Mean |INT8 - FP32| of the logits on the test split, relative to the FP32 logits' mean |x|."""
    images, _ = open_data(root / "data").array("test")
    with static_mode():
        reference = load_program(root / model / "model").run(images)
        ours = load_program(int8 / "model").run(images)
    return float(np.abs(ours - reference).mean() / np.abs(reference).mean())


def digests(folder: Path) -> dict:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


def test_the_stems_batchnorm_output_is_equalized_and_the_int8_model_is_closer_to_fp32(stems):
    export = digests(stems / "direct")
    plain, plain_dir = quantized(stems, "direct", equalize=False)
    equalized, equalized_dir = quantized(stems, "direct", equalize=True)

    (record,) = equalized.metrics["equalized_tensors"]
    # 380x apart before; the narrowest channels gain at most MAX_GAIN (64x), the others meet the widest.
    assert record["channels"] == 8 and record["range_ratio_before"] > 100
    assert record["range_ratio_after"] == pytest.approx(record["range_ratio_before"] / MAX_GAIN, rel=0.01)
    assert plain.metrics["equalized_tensors"] == []
    assert digests(stems / "direct") == export  # PaddleSlim read a rescaled copy; the export is as it was
    error_plain = int8_error(stems, "direct", plain_dir)
    error_equalized = int8_error(stems, "direct", equalized_dir)
    assert error_equalized < error_plain / 2, (error_plain, error_equalized)


def test_an_activation_between_batchnorm_and_depthwise_conv_is_left_alone(stems):
    result, _ = quantized(stems, "activated", equalize=True)
    assert result.metrics["equalized_tensors"] == []  # ReLU does not commute with a per-channel scale
