"""Calibration in one pass (`histogram="one_pass"`, the default): every batch runs once, and the thresholds are
PaddleSlim's two-pass ones to within a fine bin."""

import numpy as np
import paddle
import pytest
from test_calibration_speed import BATCHES, UPKEEP_RUNS, CountingExecutor, settings, tiny_net  # noqa: F401

from quantgate.int8.static_graph import static_mode
from quantgate.stages.quantize import fine_histogram
from quantgate.stages.quantize.calibration import Calibration, Statistics


def calibrate(root, images, out, histogram, statistics=None, **recipe):
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            calibration = Calibration(executor=CountingExecutor(paddle.CPUPlace()), scope=scope, statistics=statistics,
                                      histogram=histogram, **settings(root, images, **recipe))
            calibration.quantize()
            calibration.save_quantized_model(str(out), model_filename="model.pdmodel")
    return calibration, (out / "model.pdiparams").read_bytes()


def activation_thresholds(calibration):
    return {name: calibration._quantized_var_threshold[name] for name in calibration._quantized_act_var_name
            if name in calibration._quantized_var_threshold}


@pytest.mark.parametrize("hist_percent", [0.9999, 0.99])
def test_one_pass_runs_each_batch_once_for_paddleslims_thresholds_within_a_fine_bin(tiny_net, tmp_path, hist_percent):
    root, images = tiny_net
    exact, _ = calibrate(root, images, tmp_path / "exact", "exact", algo="hist", hist_percent=hist_percent)
    CountingExecutor.runs = 0
    once, _ = calibrate(root, images, tmp_path / "once", "one_pass", algo="hist", hist_percent=hist_percent)
    assert CountingExecutor.runs - UPKEEP_RUNS == once.forward_batches == BATCHES
    assert exact.forward_batches == 2 * BATCHES
    expected, measured = activation_thresholds(exact), activation_thresholds(once)
    assert set(measured) == set(expected) and len(expected) > 3
    for name, threshold in expected.items():
        bin_width = once.statistics.abs_max(name) / 2048
        fine_width = threshold * 2.0 ** -fine_histogram.MANTISSA_BITS
        assert abs(measured[name] - threshold) <= fine_width + bin_width, name
    weights = {name: once._quantized_var_threshold[name] for name in once._quantized_weight_var_name}
    assert weights == {name: exact._quantized_var_threshold[name] for name in exact._quantized_weight_var_name}


def test_saved_one_pass_statistics_serve_other_thresholds_without_a_forward_pass(tiny_net, tmp_path):
    root, images = tiny_net
    first, _ = calibrate(root, images, tmp_path / "first", "one_pass", algo="hist")
    folder = tmp_path / "statistics"
    folder.mkdir()
    first.statistics.save(folder)
    stored = Statistics.load(folder)
    assert stored.histograms is None and set(stored.fine_histograms) == set(first.statistics.fine_histograms)
    _, fresh = calibrate(root, images, tmp_path / "fresh", "one_pass", algo="hist", hist_percent=0.999)
    CountingExecutor.runs = 0
    reused, params = calibrate(root, images, tmp_path / "reused", "one_pass", statistics=stored, algo="hist",
                               hist_percent=0.999)
    assert params == fresh and reused.forward_batches == 0 and CountingExecutor.runs == UPKEEP_RUNS


def test_the_fine_histogram_reads_off_numpys_bins_to_within_a_fine_bin():
    rng = np.random.default_rng(2)
    cases = [rng.normal(0, 3, (4, 300_000)).astype(np.float32), rng.exponential(0.01, (2, 50_000)).astype(np.float32),
             np.full((3, 10), 2.5, np.float32), np.maximum(rng.normal(0, 1, (2, 20_000)), 0).astype(np.float32)]
    for values in cases:
        row_abs_max, abs_min, counts = fine_histogram.measure(values, None)
        magnitudes = np.abs(values)
        assert (row_abs_max == magnitudes.reshape(len(values), -1).max(axis=1)).all() and abs_min == magnitudes.min()
        first, kept = fine_histogram.trimmed(counts)
        edges = np.histogram([], bins=2048, range=(abs_min, float(row_abs_max.max())))[1]
        read = fine_histogram.uniform_histogram(kept, first, abs_min, float(row_abs_max.max()), edges)
        exact = np.histogram(magnitudes, bins=edges)[0]
        assert read.sum() == pytest.approx(values.size)
        # the cumulative counts differ by no more than the values of one fine bin at each edge
        containing = np.searchsorted(fine_histogram.fine_edges(first, first + len(kept)), edges[1:], side="right")
        fine_at_edge = kept[np.clip(containing - 1, 0, len(kept) - 1)]
        assert (np.abs(np.cumsum(read) - np.cumsum(exact)) <= fine_at_edge + 1e-6 * values.size).all()


def test_the_fine_histogram_adds_up_across_batches():
    rng = np.random.default_rng(3)
    parts = [rng.normal(0, 1, (2, 1000)).astype(np.float32) for _ in range(3)]
    counts = None
    for part in parts:
        _, _, counts = fine_histogram.measure(part, counts)
    assert (counts == fine_histogram.measure(np.concatenate(parts), None)[2]).all()
