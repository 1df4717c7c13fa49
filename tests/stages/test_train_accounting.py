"""Scaler accounting, the stage's own skip path, clipping of unscaled gradients, op-precision record (CPU)."""

import csv
import json
import shutil

import numpy as np
import pytest

from quantgate.config import TrainConfig
from quantgate.stages.train.errors import TooManySkippedSteps
from quantgate.stages.train.loop import train


def read_steps(folder):
    with open(folder / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def test_every_step_records_scale_skips_and_grad_norms(stage_dirs):
    rows = read_steps(stage_dirs.train)
    assert list(rows[0]) == ["step", "epoch", "loss", "loss_scale", "skipped", "skipped_total",
                             "grad_norm", "grad_norm_clipped", "learning_rate"]
    assert {row["skipped"] for row in rows} == {"0"} and rows[-1]["skipped_total"] == "0"
    assert all(float(row["grad_norm"]) == float(row["grad_norm_clipped"]) > 0 for row in rows)  # no clipping asked
    scaler = stage_dirs.results["train"].metrics["scaler"]
    assert scaler["scaler_enabled"] is False and "disabled" in scaler["note"]
    assert scaler["initial_scale"] == scaler["final_scale"] == scaler["min_scale"] == 1.0
    assert scaler["skipped_steps"] == 0 and scaler["skipped_ratio"] == 0.0 and scaler["steps"] == len(rows)
    assert scaler["first_overflow_step"] is None and scaler["last_overflow_step"] is None


def test_op_precision_record_says_every_op_ran_float32_on_cpu(stage_dirs):
    record = json.loads((stage_dirs.train / "op_precision.json").read_text())
    assert record["amp_effective"] is False and record["device"] == "cpu" and "float32" in record["reason"]
    assert {"conv2d", "batch_norm", "matmul_v2"} <= set(record["float32_only_ops"])
    assert record["low_precision_ops"] == []
    assert record["calls"]["float16"] == record["calls"]["bfloat16"] == 0 and record["calls"]["float32"] > 0
    assert record["ops"]["conv2d"] == {"float16": 0, "bfloat16": 0, "float32": 3, "other": 0}  # three convs, one step


def _one_nan_sample(stage_dirs, folder):
    """A copy of the data folder whose training split has one NaN pixel in one image: every batch holding it
    has NaN gradients."""
    data = shutil.copytree(stage_dirs.data, folder / "data")
    with np.load(data / "splits.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    arrays["x_train"] = arrays["x_train"].copy()
    arrays["x_train"][7, 0, 3, 3] = np.nan
    np.savez(data / "splits.npz", **arrays)
    (folder / "out").mkdir()
    return data, folder / "out", len(arrays["y_train"])


def _steps_holding(sample, n, config):
    """Replays the stage's seeded shuffle: the 1-based steps whose batch contains `sample`."""
    rng, steps, step = np.random.RandomState(config.seed), [], 0
    for _ in range(config.epochs):
        order = rng.permutation(n)
        for start in range(0, n, config.batch_size):
            step += 1
            if sample in order[start:start + config.batch_size]:
                steps.append(step)
    return steps


def test_nan_gradients_skip_exactly_their_steps_and_leave_the_model_finite(stage_dirs, tmp_path):
    data, out, n = _one_nan_sample(stage_dirs, tmp_path)
    config = TrainConfig(epochs=2, amp={"max_skipped_ratio": 0.2})
    result = train(config, data, out)
    rows = read_steps(out)
    expected = _steps_holding(7, n, config)
    assert len(expected) == 2
    assert [int(row["step"]) for row in rows if row["skipped"] == "1"] == expected
    assert [int(row["skipped_total"]) for row in rows][-1] == 2
    assert all(not np.isfinite(float(row["grad_norm"])) for row in rows if row["skipped"] == "1")
    scaler = result.metrics["scaler"]
    assert scaler["skipped_steps"] == 2 and scaler["skipped_ratio"] == pytest.approx(2 / len(rows))
    assert (scaler["first_overflow_step"], scaler["last_overflow_step"]) == (expected[0], expected[-1])
    with np.load(out / "weights.npz") as weights:  # parameters and BatchNorm statistics stayed finite
        assert all(np.isfinite(weights[name]).all() for name in weights.files)


def test_too_many_skipped_steps_fail_with_the_fix(stage_dirs, tmp_path):
    data, out, _ = _one_nan_sample(stage_dirs, tmp_path)
    # 2 skipped steps of 32 planned is 6.3 %, over the default limit of 5 %
    with pytest.raises(TooManySkippedSteps) as failure:
        train(TrainConfig(epochs=2), data, out)
    message = str(failure.value)
    assert "2 of 32 planned training steps were skipped for inf/NaN gradients" in message
    assert "train.amp.max_skipped_ratio=0.05" in message and "train.learning_rate" in message
    assert not (out / "weights.npz").exists()


def test_clipping_bounds_the_global_norm_of_every_step(stage_dirs, tmp_path):
    result = train(TrainConfig(epochs=1, grad_clip_norm=1.0), stage_dirs.data, tmp_path)
    rows = read_steps(tmp_path)
    before = np.array([float(row["grad_norm"]) for row in rows])
    after = np.array([float(row["grad_norm_clipped"]) for row in rows])
    assert (before > 1.0).any()  # the threshold really acted
    assert np.all(after <= 1.0 + 1e-6)
    np.testing.assert_allclose(after[before > 1.0], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(after[before <= 1.0], before[before <= 1.0])
    assert result.metrics["scaler"]["clipped_steps"] == int((before > 1.0).sum())
