"""AdaRound on a tiny real network (conv -> BatchNorm -> depthwise conv -> HardSwish -> 1x1 conv -> linear), through
the quantize stage (PaddleSlim) and Paddle's executor: only the integer codes move, each by one step at most,
every scale stays PaddleSlim's, and the INT8 model comes closer to FP32."""

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnxruntime as ort
import paddle
import pytest
from paddle import nn

from quantgate.config import QuantizeConfig, QuantizeRecipe
from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.static_graph import load_program, static_mode
from quantgate.int8.weight_range import this_cpus_weight_bits
from quantgate.samples.reading import open_data
from quantgate.stages.convert.onnx_export import convert
from quantgate.stages.quantize import quantize
from quantgate.stages.quantize.adaround import _fetch, save
from quantgate.stages.quantize.deployed_inputs import FROM_DEPLOYED, DeployedInputs
from quantgate.stages.quantize.quantized_weights import quantized_layers, weight_arrays
from tests.stages.test_equalization import GAMMA
from tests.stages.test_quantize_streaming import image_folder_and_cnn

NEAREST = QuantizeConfig(strategy="single", batch_size=8)
ADAPTIVE = NEAREST.model_copy(update={"rounding": "adaptive", "adaround_samples": 48, "adaround_iterations": 300})


class Block(nn.Layer):
    def __init__(self, classes: int):
        super().__init__()
        self.stem, self.norm = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.depthwise = nn.Conv2D(8, 8, 3, padding=1, groups=8)
        self.pointwise = nn.Conv2D(8, 16, 1)
        self.head = nn.Linear(16, classes)
        self.norm.weight.set_value(GAMMA)  # channels far apart: the quantize stage equalizes them
        self.depthwise.weight.set_value((self.depthwise.weight.numpy() / GAMMA.reshape(-1, 1, 1, 1)).astype(np.float32))

    def forward(self, x):
        x = nn.functional.hardswish(self.depthwise(self.norm(self.stem(x))))
        x = nn.functional.hardswish(self.pointwise(x))
        return self.head(paddle.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    root = image_folder_and_cnn(tmp_path_factory.mktemp("adaround"), per_class=40)
    data = open_data(root / "data")
    paddle.seed(1)
    net = Block(data.num_classes)
    net.eval()
    spec = paddle.static.InputSpec([None, *data.input_shape], "float32", "image")
    paddle.jit.save(net, str(root / "block" / "model"), input_spec=[spec])
    return root


def quantized(root: Path, config: QuantizeConfig, name: str, **options):
    out = root / name
    out.mkdir()
    return quantize(config, root / "block", "model.pdmodel", "model.pdiparams", root / "data", out, **options), out


def parameters(folder: Path) -> dict[str, np.ndarray]:
    with static_mode():
        program = load_program(folder / "model")
        return {var.name: np.array(program.scope.find_var(var.name).get_tensor())
                for var in program.program.list_vars() if var.persistable and var.name not in ("feed", "fetch")}


def int8_error(root: Path, int8: Path, split: str) -> float:
    images, _ = open_data(root / "data").array(split)
    with static_mode():
        reference = load_program(root / "block" / "model").run(images)
        ours = load_program(int8 / "model").run(images)
    return float(np.mean((ours - reference) ** 2))


def test_adaptive_rounding_moves_codes_by_one_step_at_most_keeps_the_scales_and_comes_closer_to_fp32(block):
    nearest, nearest_dir = quantized(block, NEAREST, "nearest")
    adaptive, adaptive_dir = quantized(block, ADAPTIVE, "adaptive")

    record = adaptive.metrics["adaround"]
    assert nearest.metrics["adaround"] is None and adaptive.metrics["recipe"]["rounding"] == "adaptive"
    # The stem's BatchNorm output, rescaled for the depthwise conv, is refitted against the rescaled FP32 copy.
    assert adaptive.metrics["equalized_tensors"] and record["skipped"] == {}
    assert sorted(layer["op"] for layer in record["layers"].values()) == \
        ["conv2d", "conv2d", "depthwise_conv2d", "matmul_v2"], record
    before, after = parameters(nearest_dir), parameters(adaptive_dir)
    assert before.keys() == after.keys()
    changed = {name for name in before if not np.array_equal(before[name], after[name])}
    kept = {name for name, layer in record["layers"].items() if layer["kept"]}
    assert changed == kept and kept, (changed, record)  # only the codes of refitted layers, no scale, no bias
    for name in kept:
        layer = record["layers"][name]
        assert layer["error_adaptive"] < layer["error_nearest"]
        steps = after[name] - before[name]
        assert np.abs(steps).max() == 1 and np.count_nonzero(steps) == layer["codes_changed"]
        assert after[name].min() >= -128 and after[name].max() <= 127
    # Closer to FP32 on the rows it was fitted on, and on the test split it never saw.
    assert int8_error(block, adaptive_dir, "calibration") < int8_error(block, nearest_dir, "calibration")
    assert int8_error(block, adaptive_dir, "test") < int8_error(block, nearest_dir, "test")


def test_a_recipe_can_ask_for_adaptive_rounding():
    assert NEAREST.with_recipe(QuantizeRecipe(rounding="adaptive")).rounding == "adaptive"
    assert NEAREST.with_recipe(QuantizeRecipe()).rounding == "nearest"


@contextmanager
def nearest_programs(block: Path, name: str):
    """(INT8 program, FP32 program, its quantized layers, 3 calibration batches of 8), in static mode."""
    _, folder = quantized(block, NEAREST, name)
    images, _ = open_data(block / "data").array("calibration")
    with static_mode():
        int8, fp32 = load_program(folder / "model"), load_program(block / "block" / "model")
        yield int8, fp32, quantized_layers(int8, fp32)[0], [images[start:start + 8] for start in range(0, 24, 8)]


def test_a_layers_input_carried_from_the_layer_before_is_the_programs_own(block):
    """AdaRound feeds each layer's INT8 input on from the previous layer's (only the ops between them run): it
    must be what the whole program computes, skip paths included."""
    with nearest_programs(block, "carried") as (int8, _, layers, batches):
        carried = None
        for layer in layers:
            (whole,) = _fetch(int8, batches, [layer.int8_input])
            if carried is not None and carried[0] != layer.int8_input:
                (fed,) = _fetch(int8, batches, [layer.int8_input], carried)
                np.testing.assert_array_equal(fed, whole)
            carried = (layer.int8_input, whole)
    assert len(layers) == 4


def test_the_same_settings_give_the_same_codes(block):
    _, first = quantized(block, ADAPTIVE, "seeded_once")
    _, second = quantized(block, ADAPTIVE, "seeded_twice")
    once, twice = parameters(first), parameters(second)
    assert once.keys() == twice.keys()
    assert all(np.array_equal(once[name], twice[name]) for name in once)


def lowered_error(root: Path, int8: Path, split: str, hardswish_grids: bool) -> float:
    """Mean squared output error against FP32 of `int8` lowered as the convert stage lowers it, in onnxruntime."""
    out = int8.parent / f"{int8.name}-convert-{hardswish_grids}"
    out.mkdir(exist_ok=True)
    convert(root / "block", int8, "model.pdmodel", "model.pdiparams", out, this_cpus_weight_bits(), hardswish_grids)
    images, _ = open_data(root / "data").array(split)
    outputs = {}
    for name in ("fp32.onnx", "int8.onnx"):
        session = ort.InferenceSession(str(out / name), providers=["CPUExecutionProvider"])
        outputs[name] = session.run(None, {session.get_inputs()[0].name: images})[0]
    return float(np.mean((outputs["int8.onnx"] - outputs["fp32.onnx"]) ** 2))


@pytest.mark.parametrize("grids", [False, True])
def test_each_layer_is_fitted_on_what_the_lowered_model_feeds_it_and_the_model_that_runs_comes_closer(block, grids):
    weight_bits = this_cpus_weight_bits().bits
    nearest, nearest_dir = quantized(block, NEAREST, f"lowered-nearest-{grids}", weight_bits=weight_bits,
                                     hardswish_grids=grids)
    adaptive, adaptive_dir = quantized(block, ADAPTIVE, f"lowered-adaptive-{grids}", weight_bits=weight_bits,
                                       hardswish_grids=grids)
    record = adaptive.metrics["adaround"]
    # every layer found in the lowered model by its codes, and fitted on what that model feeds it
    assert record["inputs_from_lowered_model"] == len(record["layers"]) == 4
    # the lowering the convert stage makes (FP32 groups dropped wherever a layer is FP32: none is here)
    assert record["lowering"] == {"weight_bits": weight_bits, "hardswish_grids": grids, "float_groups": True}
    assert {layer["input_from"] for layer in record["layers"].values()} == {FROM_DEPLOYED}
    # the whole lowered model, in onnxruntime, on the test split no layer was fitted on
    assert lowered_error(block, adaptive_dir, "test", grids) < lowered_error(block, nearest_dir, "test", grids)


def test_the_lowered_models_input_to_a_layer_is_the_programs_within_a_grid_step(block):
    """Where the lowering adds no rounding in front of a layer, its input in the lowered model is the program's."""
    with nearest_programs(block, "deployed-inputs") as (int8, fp32, layers, batches):
        deployed = DeployedInputs.lowered(int8, Lowering(), save)
        stem = layers[0]  # reads the image, quantized on PaddleSlim's grid in both
        assert deployed.find(stem, weight_arrays(int8, fp32, stem)[0])
        (program_input,) = _fetch(int8, batches, [stem.int8_input])
        lowered_input = deployed.inputs(stem, batches)
    step = np.abs(program_input).max() / 127
    assert lowered_input.shape == program_input.shape and np.abs(lowered_input - program_input).max() <= step * 1.01
