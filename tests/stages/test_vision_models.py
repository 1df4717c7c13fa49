"""The whole pipeline, stage by stage, for each paddle.vision.models family and for a user network.

These runs check plumbing (BatchNorm statistics exported, INT8 and ONNX conversion, gate), not accuracy:
tiny 32x32 images, one epoch, a relaxed gate.
"""

import numpy as np
import onnx
import pytest
from folder_images import write_image_folder
from paddle import nn

from quantgate.config import validate_config
from quantgate.models.models import build_model
from quantgate.stages.convert import onnx_export as convert
from quantgate.stages.data import splits as data
from quantgate.stages.evaluate import accuracy as evaluate
from quantgate.stages.export import inference_model as export
from quantgate.stages.gate import decision as gate
from quantgate.stages.quantize import ptq as quantize
from quantgate.stages.train import loop as train
from quantgate.stages.train.errors import ModelError


def tiny_user_net(num_classes: int, input_shape: tuple[int, int, int]) -> nn.Layer:
    """A user network, built from the data's input shape (the entry point tests/stages/test_vision_models:...)."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2D(channels, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU(), nn.MaxPool2D(2),
        nn.Flatten(), nn.Linear(8 * (height // 2) * (width // 2), num_classes),
    )


def not_a_layer(num_classes):
    return "a string"


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("images"), classes=3, per_class=8)


def run_pipeline(architecture, images, root):
    config = validate_config({
        "data": {"dataset": "image_folder", "path": str(images), "test_fraction": 0.25, "calibration_fraction": 0.25,
                 "validation_fraction": 0,
                 "transforms": {"resize": 32, "center_crop": 32, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}},
        "train": {"architecture": architecture, "epochs": 1, "batch_size": 6},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 6},
        "evaluate": {"latency_repeats": 3},
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0},  # plumbing, not accuracy
    })
    dirs = {name: root / name for name in ("data", "train", "export", "quantize", "convert", "evaluate", "gate")}
    for folder in dirs.values():
        folder.mkdir()
    splits = dirs["data"]  # the data stage's folder: the later stages stream its files
    results = {"data": data.prepare_data(config.data, dirs["data"])}
    results["train"] = train.train(config.train, splits, dirs["train"])
    results["export"] = export.export(dirs["train"] / "weights.npz", dirs["train"] / "reference_logits.npy", splits,
                                      results["train"].metrics["architecture"], dirs["export"])
    results["quantize"] = quantize.quantize(config.quantize, dirs["export"], "model.pdmodel", "model.pdiparams", splits,
                                            dirs["quantize"])
    results["convert"] = convert.convert(dirs["export"], dirs["quantize"], "model.pdmodel", "model.pdiparams",
                                         dirs["convert"])
    results["evaluate"] = evaluate.evaluate(config.evaluate, dirs["convert"] / "fp32.onnx", dirs["convert"] / "int8.onnx",
                                            splits, dirs["evaluate"])
    results["gate"] = gate.gate(config.gate, results["evaluate"].metrics, dirs["gate"])
    return dirs, results


@pytest.mark.parametrize("architecture", [
    "resnet18", "mobilenet_v1", "mobilenet_v2", "mobilenet_v3_small", "test_vision_models:tiny_user_net",
])
def test_each_family_goes_from_training_to_a_gated_int8_onnx(architecture, image_folder, tmp_path):
    dirs, results = run_pipeline(architecture, image_folder, tmp_path)
    assert results["train"].metrics["architecture"] == architecture
    assert results["train"].metrics["input_shape"] == [3, 32, 32] and results["train"].metrics["num_classes"] == 3

    with np.load(dirs["train"] / "weights.npz") as weights:
        names = weights.files
        running_means = [weights[name] for name in names if name.endswith("._mean")]
        running_variances = [weights[name] for name in names if name.endswith("._variance")]
    # BatchNorm running statistics are saved with the parameters, and training moved them off their init (0 / 1).
    assert running_means and len(running_means) == len(running_variances)
    assert any(np.abs(mean).max() > 0 for mean in running_means)
    assert any(np.abs(variance - 1).max() > 0 for variance in running_variances)
    # ...and exported: every saved array is in the inference model, which reproduces eval-mode training outputs.
    assert results["export"].metrics["parameters"] == len(names)
    assert results["export"].metrics["max_abs_diff_vs_trained"] <= 1e-4

    assert results["quantize"].metrics["quantize_linear_ops"] > 0
    int8_ops = {node.op_type for node in onnx.load(str(dirs["convert"] / "int8.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= int8_ops
    if architecture in ("resnet18", "mobilenet_v2"):
        # The tail (ReLU/ReLU6 -> global pool -> flatten) runs on integers with PaddleSlim's scales, as onnxruntime's
        # own quantizer would run it: no float pool, no float clip, no dequantized feature map.
        runtime = results["convert"].metrics["int8"]["after_onnxruntime_optimization"]["ops"]
        assert runtime.get("QLinearGlobalAveragePool") == 1
        assert not {"GlobalAveragePool", "Clip", "Relu", "Conv", "FusedConv"} & set(runtime)
        assert results["convert"].metrics["int8"]["derived_activation_scales"]
    metrics = results["evaluate"].metrics
    assert metrics["test_samples"] == 6 and len(metrics["per_class_top1_pct_fp32"]) == 3
    assert results["gate"].passed


def test_unknown_or_broken_architectures_are_named():
    with pytest.raises(ModelError, match="unknown train.architecture 'resnet7'.*resnet18"):
        build_model("resnet7", 3, (3, 32, 32))
    with pytest.raises(ModelError, match="cannot import 'no_such_package.models'.*PYTHONPATH"):
        build_model("no_such_package.models:net", 3, (3, 32, 32))
    with pytest.raises(ModelError, match="returned str, not a paddle.nn.Layer"):
        build_model("test_vision_models:not_a_layer", 3, (3, 32, 32))
    with pytest.raises(ModelError, match="takes 3-channel RGB input"):
        build_model("resnet18", 3, (1, 32, 32))
