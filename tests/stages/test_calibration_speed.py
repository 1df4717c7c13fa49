"""The faster calibration (stages/quantize/calibration.py) saves PaddleSlim's INT8 program, scale for scale,
and a second calibration with other thresholds reuses the first one's statistics without a forward pass."""

import numpy as np
import paddle
import pytest
from paddleslim.quant import quant_post_static
from test_quantize_streaming import image_folder_and_cnn

from quantgate.config import QuantizeConfig
from quantgate.int8.static_graph import static_mode
from quantgate.models.models import build_model
from quantgate.stages.data import open_data
from quantgate.stages.quantize.calibration import Calibration, Statistics, _histogram
from quantgate.stages.quantize.ptq import quantize_with_data

BATCH, BATCHES = 8, 3
UPKEEP_RUNS = 2  # executor runs besides the calibration batches: loading the model and saving it
QUANTIZABLE = ["conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2"]


@pytest.fixture(scope="module")
def tiny_net(tmp_path_factory):
    """An untrained digits CNN (convolutions and a matmul) exported for 3x16x16 inputs, and calibration batches."""
    root = tmp_path_factory.mktemp("calibration_speed")
    paddle.seed(0)
    model = build_model("digits_cnn", 3, (3, 16, 16))
    model.eval()
    paddle.jit.save(model, str(root / "export" / "model"),
                    input_spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "image")])
    rng = np.random.default_rng(0)
    images = rng.normal(0, 1, (BATCH * BATCHES, 3, 16, 16)).astype(np.float32)
    return root, images


def feed(images):
    return lambda: ({"image": images[start: start + BATCH]} for start in range(0, len(images), BATCH))


def settings(root, images, **recipe):
    """quant_post_static's arguments; paddle's own defaults differ (hist_percent, quantizable_op_type)."""
    return dict(model_dir=str(root / "export"), data_loader=feed(images), model_filename="model.pdmodel",
                params_filename="model.pdiparams", batch_size=BATCH, batch_nums=BATCHES, onnx_format=True,
                **{"hist_percent": 0.9999, "quantizable_op_type": QUANTIZABLE, **recipe})


def paddleslim_files(root, images, out, **recipe):
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            quant_post_static(executor=paddle.static.Executor(paddle.CPUPlace()), quantize_model_path=str(out),
                              scope=scope, **settings(root, images, **recipe))
    return program_ops(out), (out / "model.pdiparams").read_bytes()


def program_ops(folder):
    """The saved program's ops with their inputs and outputs, sorted: PaddleSlim's own runs differ in the order
    of independent ops and so in the program's bytes, not in its graph."""
    with static_mode():
        program = paddle.static.Program.parse_from_string((folder / "model.pdmodel").read_bytes())
    return sorted(repr((op.type, [(slot, op.input(slot)) for slot in sorted(op.input_names)],
                        [(slot, op.output(slot)) for slot in sorted(op.output_names)]))
                  for op in program.global_block().ops)


class CountingExecutor(paddle.static.Executor):
    runs = 0
    kept: list[set[str]] = []  # each run's persistable non-parameter variables: the activations kept in the scope

    def run(self, program=None, *args, **kwargs):
        CountingExecutor.runs += 1
        if program is not None:
            CountingExecutor.kept.append({var.name for var in program.list_vars() if var.persistable
                                          and not isinstance(var, paddle.base.framework.Parameter)
                                          and var.name not in ("feed", "fetch")})
        return super().run(program, *args, **kwargs)


def calibration_files(root, images, out, statistics=None, passes=1, **recipe):
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            calibration = Calibration(executor=CountingExecutor(paddle.CPUPlace()), scope=scope, statistics=statistics,
                                      passes=passes, **settings(root, images, **recipe))
            calibration.quantize()
            calibration.save_quantized_model(str(out), model_filename="model.pdmodel")
    return (program_ops(out), (out / "model.pdiparams").read_bytes()), calibration


@pytest.mark.parametrize("recipe", [
    {"algo": "hist"}, {"algo": "hist", "hist_percent": 0.99, "weight_quantize_type": "abs_max"},
    {"algo": "avg"}, {"algo": "abs_max"},  # 'KL' bins as 'hist' does; paddle's KL search alone takes a minute here
    {"algo": "mse"},
], ids=lambda recipe: "-".join(str(value) for value in recipe.values()))
def test_the_saved_int8_program_has_paddleslims_ops_scales_and_weights(tiny_net, tmp_path, recipe):
    root, images = tiny_net
    expected = paddleslim_files(root, images, tmp_path / "paddleslim", **recipe)
    CountingExecutor.runs = 0
    (ops, params), calibration = calibration_files(root, images, tmp_path / "ours", **recipe)
    assert ops == expected[0]
    assert params == expected[1]  # every scale and quantized weight, bit for bit
    passes = 2 if recipe["algo"] in ("hist", "KL") else 1
    assert CountingExecutor.runs - UPKEEP_RUNS == calibration.forward_batches == passes * BATCHES


@pytest.mark.parametrize("algo", ["hist", "mse"])
def test_sampling_in_passes_keeps_a_share_of_the_activations_and_saves_the_same_program(tiny_net, tmp_path, algo):
    """A budget too small for one sample's activations: each pass over the data keeps a third of them."""
    root, images = tiny_net
    expected, whole = calibration_files(root, images, tmp_path / "whole", algo=algo)
    CountingExecutor.runs, CountingExecutor.kept = 0, []
    split, calibration = calibration_files(root, images, tmp_path / "split", passes=3, algo=algo)
    assert split == expected  # every scale and weight, bit for bit
    assert calibration.forward_batches == 3 * whole.forward_batches
    sampled = set(whole.statistics.row_abs_max)
    held = [len(kept & sampled) for kept in CountingExecutor.kept if kept & sampled]
    assert len(held) == calibration.forward_batches and max(held) < len(sampled) / 2
    assert set().union(*(kept & sampled for kept in CountingExecutor.kept)) == sampled


def test_reused_statistics_give_a_fresh_runs_scales_without_a_forward_pass(tiny_net, tmp_path):
    root, images = tiny_net
    _, first = calibration_files(root, images, tmp_path / "first", algo="hist", hist_percent=0.9999)
    folder = tmp_path / "statistics"
    folder.mkdir()
    first.statistics.save(folder)
    stored = Statistics.load(folder)
    for index, recipe in enumerate([{"algo": "hist", "hist_percent": 0.999}, {"algo": "avg"},
                                    {"algo": "hist", "skip_tensor_list": ["conv2d_0.w_0"], "bias_correction": True}]):
        fresh, _ = calibration_files(root, images, tmp_path / f"fresh{index}", **recipe)
        CountingExecutor.runs = 0
        reused, calibration = calibration_files(root, images, tmp_path / f"reused{index}", statistics=stored, **recipe)
        assert reused == fresh
        assert calibration.forward_batches == 0 and CountingExecutor.runs == UPKEEP_RUNS


def test_first_pass_statistics_serve_a_histogram_run_with_one_pass_more(tiny_net, tmp_path):
    root, images = tiny_net
    _, averaged = calibration_files(root, images, tmp_path / "avg", algo="avg")
    folder = tmp_path / "statistics"
    folder.mkdir()
    averaged.statistics.save(folder, with_histograms=False)
    fresh, _ = calibration_files(root, images, tmp_path / "fresh", algo="hist")
    reused, calibration = calibration_files(root, images, tmp_path / "reused", statistics=Statistics.load(folder),
                                            algo="hist")
    assert reused == fresh and calibration.forward_batches == BATCHES


def test_histograms_count_as_numpy_does_on_edge_values_constants_and_integers():
    rng = np.random.default_rng(1)
    cases = [rng.normal(0, 3, 300_000).astype(np.float32), np.abs(rng.normal(5, 1e-3, 50_000)).astype(np.float32),
             np.full(1000, 2.5, np.float32), rng.integers(-7, 9, 5000).astype(np.int32)]
    lows, highs = [np.abs(case).min() for case in cases], [np.abs(case).max() for case in cases]
    edges = [np.histogram([], bins=2048, range=(float(low), float(high)))[1] for low, high in zip(lows, highs)]
    cases[0][:2049] = np.where(np.arange(2049) % 2, 1, -1) * edges[0].astype(np.float32)  # values on the edges
    for values, bin_edges in zip(cases, edges):
        assert (_histogram(values, bin_edges) == np.histogram(np.abs(values), bins=bin_edges)[0]).all()


def test_a_second_quantize_reuses_statistics_and_records_its_split(tmp_path):
    """quantize_with_data returns what it measured; given it back, it feeds no calibration batch at all."""
    data = open_data(image_folder_and_cnn(tmp_path, per_class=20) / "data")
    outs = [tmp_path / name for name in ("cold", "warm", "fresh")]
    for out in outs:
        out.mkdir()
    args = (tmp_path / "export", "model.pdmodel", "model.pdiparams", data)
    cold = quantize_with_data(QuantizeConfig(strategy="single", batch_size=4), *args, outs[0])
    other = QuantizeConfig(strategy="single", batch_size=4, hist_percent=0.99)
    warm = quantize_with_data(other, *args, outs[1], statistics=cold.statistics)
    fresh = quantize_with_data(other, *args, outs[2])
    assert cold.metrics["calibration_statistics_reused"] is False and cold.metrics["calibration_forward_batches"] > 0
    assert cold.metrics["calibration_forward_s"] > 0 and cold.metrics["calibration_statistics_s"] > 0
    assert warm.metrics["calibration_statistics_reused"] is True and warm.metrics["calibration_forward_batches"] == 0
    assert warm.metrics["calibration_samples"] == fresh.metrics["calibration_samples"] > 0
    assert (outs[1] / "model.pdiparams").read_bytes() == (outs[2] / "model.pdiparams").read_bytes()


def test_mse_losses_are_kept_and_serve_a_second_mse_run_without_a_forward_pass(tiny_net, tmp_path):
    root, images = tiny_net
    _, histogram = calibration_files(root, images, tmp_path / "hist", algo="hist")
    CountingExecutor.runs = 0
    fresh, first = calibration_files(root, images, tmp_path / "mse", statistics=histogram.statistics, algo="mse")
    assert first.forward_batches == BATCHES  # the losses need a pass of their own; the ranges came with the histogram
    assert histogram.statistics.mse_losses is None  # statistics given to a run are never changed by it
    assert all(len(batches) == BATCHES for batches in first.statistics.mse_losses.values())
    folder = tmp_path / "statistics"
    folder.mkdir()
    first.statistics.save(folder)
    CountingExecutor.runs = 0
    reused, second = calibration_files(root, images, tmp_path / "reused", statistics=Statistics.load(folder),
                                       algo="mse", bias_correction=True)
    assert second.forward_batches == 0 and CountingExecutor.runs == UPKEEP_RUNS
    assert reused == calibration_files(root, images, tmp_path / "again", algo="mse", bias_correction=True)[0]
    assert fresh == paddleslim_files(root, images, tmp_path / "paddleslim", algo="mse")
