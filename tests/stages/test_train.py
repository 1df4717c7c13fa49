import csv
import shutil

import numpy as np
import pytest

from quantgate.config import TrainConfig
from quantgate.stages.train.errors import TooManySkippedSteps, TrainingDiverged
from quantgate.stages.train.loop import train
from quantgate.stages.train.parts import DivergenceWatch, check_finite


def test_steps_record_loss_and_loss_scale(stage_dirs):
    with open(stage_dirs.train / "steps.csv") as handle:
        rows = list(csv.DictReader(handle))
    metrics = stage_dirs.results["train"].metrics
    assert len(rows) == metrics["steps"] > 0
    assert {"step", "epoch", "loss", "loss_scale", "learning_rate"} <= set(rows[0])
    losses = [float(row["loss"]) for row in rows]
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 2  # it really learned
    # On CPU the GradScaler is disabled, so the loss scale in force is 1.
    assert {float(row["loss_scale"]) for row in rows} == {1.0}


def test_cpu_amp_record_is_honest(stage_dirs):
    amp = stage_dirs.results["train"].metrics["amp"]
    assert amp["requested"]["enabled"] is True and amp["requested"]["level"] == "O1"
    assert amp["effective"] is False
    assert amp["device"] == "cpu" and "cpu" in amp["reason"] and "float32" in amp["reason"]
    assert amp["scaler_enabled"] is False
    assert amp["low_precision_layer_outputs"] == 0 and amp["layer_outputs"] > 0
    with np.load(stage_dirs.train / "weights.npz") as weights:
        assert {weights[name].dtype for name in weights.files} == {np.dtype("float32")}


def test_digits_are_read_in_memory_without_workers_or_augmentation(stage_dirs):
    metrics = stage_dirs.results["train"].metrics
    assert metrics["data_loader"] == {"num_workers": 0, "on_disk": False}
    assert metrics["augmentation"]["enabled"] is False


def test_o2_bfloat16_trains_and_ships_float32_on_cpu(stage_dirs, tmp_path):
    config = TrainConfig(epochs=1, amp={"level": "O2", "dtype": "bfloat16", "custom_black_list": ["softmax"]})
    result = train(config, stage_dirs.data, tmp_path)
    amp = result.metrics["amp"]
    assert amp["requested"]["level"] == "O2" and amp["requested"]["dtype"] == "bfloat16"
    assert amp["requested"]["custom_black_list"] == ["softmax"]
    assert amp["effective"] is False and amp["weights_source"] == "parameters_float32"
    with np.load(tmp_path / "weights.npz") as weights:
        assert {weights[name].dtype for name in weights.files} == {np.dtype("float32")}


def _poisoned_data(stage_dirs, folder, poison):
    """A copy of the data stage's folder (dataset.json, splits.npz) whose training images `poison` changed."""
    data = shutil.copytree(stage_dirs.data, folder / "data")
    with np.load(data / "splits.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    arrays["x_train"] = arrays["x_train"].copy()
    poison(arrays["x_train"])
    np.savez(data / "splits.npz", **arrays)
    out = folder / "out"
    out.mkdir()
    return data, out


def test_a_loss_that_stays_nan_is_an_error():
    # The CNN's ReLUs turn NaN activations into zeros, so poisoned data alone rarely makes its loss NaN;
    # the streak rule is checked here on its own, the weight check below on real training.
    watch = DivergenceWatch(limit=3, learning_rate=0.5)
    for step, loss in enumerate([2.3, float("nan"), 1.9, float("nan"), float("inf")], start=1):
        watch.observe(step, loss)  # two bad steps in a row are recoverable
    with pytest.raises(TrainingDiverged, match=r"NaN/inf for 3 consecutive steps \(first at step 4, learning_rate=0.5\)"):
        watch.observe(6, float("nan"))


def test_nan_in_every_image_skips_every_step_and_fails_at_once(stage_dirs, tmp_path):
    def one_pixel_nan(images):
        images[:, 0, 0, 0] = np.nan  # max-pooling hides it from the loss, not from the gradients

    data, out = _poisoned_data(stage_dirs, tmp_path, one_pixel_nan)
    with pytest.raises(TooManySkippedSteps, match=r"1 of 16 planned training steps were skipped .*first at step 1"):
        train(TrainConfig(epochs=1), data, out)
    assert not (out / "weights.npz").exists()


def test_non_finite_weights_are_an_error():
    with pytest.raises(TrainingDiverged, match=r"non-finite weights in \['b'\] \(learning_rate=0.1\)"):
        check_finite({"a": np.zeros(2, np.float32), "b": np.array([1.0, np.inf], np.float32)}, 0.1)


def test_training_scalars_are_readable_by_visualdl(stage_dirs):
    from visualdl import LogReader

    with open(stage_dirs.train / "steps.csv") as handle:
        rows = list(csv.DictReader(handle))
    logs = sorted((stage_dirs.train / "vdl").iterdir())
    assert [log.name for log in logs] == ["vdlrecords.train.log"]
    reader = LogReader(file_path=str(logs[0]))
    assert set(reader.get_tags()["scalar"]) == {
        "train/loss", "train/learning_rate", "train/loss_scale", "train/grad_norm", "train/skipped_steps_total",
        "train/samples_per_second"}
    steps = [int(row["step"]) for row in rows]
    for tag, column in (("train/loss", "loss"), ("train/loss_scale", "loss_scale"), ("train/grad_norm", "grad_norm")):
        records = reader.get_data("scalar", tag)
        assert [record.id for record in records] == steps
        # VisualDL stores float32.
        assert np.allclose([record.value for record in records], [float(row[column]) for row in rows], rtol=1e-6)
    throughput = reader.get_data("scalar", "train/samples_per_second")
    assert [record.id for record in throughput] == steps and all(record.value > 0 for record in throughput)
