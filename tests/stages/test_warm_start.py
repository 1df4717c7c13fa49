"""Warm starts in the train stage: state dicts read without running code, matched key by key against the model."""

import csv
import io
from collections import defaultdict

import numpy as np
import paddle
import pytest

from quantgate.config import DataConfig, TrainConfig
from quantgate.models.models import DigitsCNN
from quantgate.stages.data import prepare_data
from quantgate.stages.train.errors import ResumeMismatch, WarmStartMismatch
from quantgate.stages.train.loop import train
from quantgate.stages.train.outputs import INIT_FROM, STEPS_FILE, WEIGHTS_FILE
from quantgate.stages.train.warm_start import InitWeights, read_state_dict, start_from


def epoch_losses(steps_csv):
    """Mean training loss per epoch, from the stage's steps.csv."""
    losses = defaultdict(list)
    with open(steps_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            losses[int(row["epoch"])].append(float(row["loss"]))
    return [float(np.mean(losses[epoch])) for epoch in sorted(losses)]


def npz_arrays(path):
    with np.load(path, allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """The digits split, and a 3-epoch cold run's folder on them."""
    root = tmp_path_factory.mktemp("warm-start")
    data, out = root / "data", root / "cold"
    data.mkdir(), out.mkdir()
    prepare_data(DataConfig(), data)
    assert train(TrainConfig(epochs=3), data, out).metrics[INIT_FROM] is None  # a cold start records no init
    return data, out


def test_a_warm_start_begins_near_where_its_weights_left_off(cold, tmp_path):
    data, out = cold
    result = train(TrainConfig(epochs=1), data, tmp_path,
                   init_weights=InitWeights(npz_arrays(out / WEIGHTS_FILE), True, "the cold run's weights"))
    cold_losses, warm_losses = epoch_losses(out / STEPS_FILE), epoch_losses(tmp_path / STEPS_FILE)
    assert cold_losses[0] > 0.5  # a cold start: far from trained
    # The warm start's first epoch is about where the cold run ended, nowhere near where it began.
    assert abs(warm_losses[0] - cold_losses[-1]) < 0.2 * (cold_losses[0] - cold_losses[-1])
    assert result.metrics[INIT_FROM] == {"strict": True, "fresh_keys": [], "unused_keys": [], "loaded_keys": 20}


def test_strict_lists_missing_unexpected_and_mis_shaped_keys_before_training(cold, tmp_path):
    data, out = cold
    weights = npz_arrays(out / WEIGHTS_FILE)
    del weights["features.1._mean"]
    weights["classifier.bias"] = np.zeros(9, np.float32)
    weights["head.extra"] = np.zeros(3, np.float32)
    with pytest.raises(WarmStartMismatch) as caught:
        train(TrainConfig(epochs=1), data, tmp_path, init_weights=InitWeights(weights, True, "file w.npz"))
    message = str(caught.value)
    assert "file w.npz does not fit train.architecture='digits_cnn'" in message
    assert "1 missing key(s): features.1._mean" in message
    assert "1 unexpected key(s): head.extra" in message
    assert "1 mis-shaped key(s): classifier.bias (model [10], given [9])" in message
    assert "train.init_strict: false" in message
    assert not (tmp_path / STEPS_FILE).exists()  # refused before the first step


def test_non_strict_loads_what_fits_and_lets_the_rest_start_fresh(cold):
    _, out = cold
    weights = npz_arrays(out / WEIGHTS_FILE)
    del weights["classifier.bias"]
    weights["classifier.weight"] = np.ones((64 * 16, 7), np.float32)  # another head: 7 classes
    weights["head.extra"] = np.zeros(3, np.float32)
    paddle.seed(0)
    fresh = {name: tensor.numpy() for name, tensor in DigitsCNN().state_dict().items()}
    paddle.seed(0)
    model = DigitsCNN()
    record = start_from(model, InitWeights(weights, False, "file w.npz"), "digits_cnn")
    assert record == {"strict": False, "fresh_keys": ["classifier.bias", "classifier.weight"],
                      "unused_keys": ["head.extra"], "loaded_keys": 18}
    state = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    np.testing.assert_array_equal(state["features.0.weight"], weights["features.0.weight"])
    np.testing.assert_array_equal(state["features.1._mean"], weights["features.1._mean"])
    # The fresh head is what a cold start with this seed has.
    np.testing.assert_array_equal(state["classifier.weight"], fresh["classifier.weight"])
    assert model.training


def test_non_strict_still_refuses_weights_of_which_nothing_fits():
    with pytest.raises(WarmStartMismatch, match="none of its 1 key"):
        start_from(DigitsCNN(), InitWeights({"encoder.weight": np.zeros(3, np.float32)}, False, "f.npz"), "digits_cnn")


def test_a_pdparams_pickle_is_refused_without_permission_and_loads_with_it():
    state = DigitsCNN().state_dict()
    buffer = io.BytesIO()
    paddle.save(state, buffer)
    with pytest.raises(WarmStartMismatch, match=r"is a pickle \(\.pdparams\) and train.init_allow_pickle is false"):
        read_state_dict(buffer.getvalue(), "w.pdparams", allow_pickle=False, source="file w.pdparams")
    arrays = read_state_dict(buffer.getvalue(), "w.pdparams", allow_pickle=True, source="file w.pdparams")
    assert sorted(arrays) == sorted(state)
    np.testing.assert_array_equal(arrays["classifier.weight"], state["classifier.weight"].numpy())


def test_an_npz_that_would_need_pickle_is_refused_without_running_it():
    class Payload:
        def __reduce__(self):
            return (exec, ("raise SystemExit('the pickle ran')",))

    buffer = io.BytesIO()
    np.savez(buffer, **{"features.0.weight": np.array([Payload()], dtype=object)})
    with pytest.raises(WarmStartMismatch, match="file w.npz: .*numpy.savez"):
        read_state_dict(buffer.getvalue(), "w.npz", allow_pickle=False, source="file w.npz")


def test_a_run_is_either_resumed_or_warm_started(cold, tmp_path):
    from quantgate.stages.train.checkpoint_state import CheckpointBytes

    data, out = cold
    with pytest.raises(ResumeMismatch, match="pick one"):
        train(TrainConfig(epochs=2), data, tmp_path, resume_from=CheckpointBytes("epoch-0001", {}),
              init_weights=InitWeights(npz_arrays(out / WEIGHTS_FILE), True, "w"))

