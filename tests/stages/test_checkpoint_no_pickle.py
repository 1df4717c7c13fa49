"""Checkpoint state as .npz arrays and a JSON skeleton: every piece of training state round-trips bit for bit
without pickle, including what only a GPU run produces (float16/bfloat16 tensors, an enabled GradScaler)."""

import json
import random

import numpy as np
import paddle
import pytest

from quantgate.stages.train.state_arrays import flatten, from_npz_bytes, to_npz_bytes, unflatten


def round_trip(tree):
    arrays = {}
    skeleton = json.loads(json.dumps(flatten(tree, arrays), allow_nan=False))  # strict JSON, as in state.json
    return unflatten(skeleton, from_npz_bytes(to_npz_bytes(arrays)))


def test_low_precision_tensors_and_nested_state_round_trip_bit_for_bit():
    values = paddle.to_tensor(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
    tree = {
        "fp16": values.astype("float16"),
        "bf16": values.astype("bfloat16"),  # numpy has no bfloat16: its bits travel as uint16
        "master_weights": {"linear_0.w_0": values, "step": paddle.to_tensor(7, dtype="int64")},
        "LR_Scheduler": {"last_epoch": 3, "last_lr": 0.002},
        "scaler": {"scale": np.array([32768.0], dtype=np.float32), "incr_count": 5, "use_dynamic_loss_scaling": True},
        "odd": (np.float64(0.1), float("nan"), float("-inf"), None, ["x", 1]),
    }
    back = round_trip(tree)
    for key in ("fp16", "bf16"):
        assert back[key].dtype == tree[key].dtype
        np.testing.assert_array_equal(back[key].numpy(), tree[key].numpy())  # bfloat16: its bits, as uint16
    np.testing.assert_array_equal(back["master_weights"]["linear_0.w_0"].numpy(), values.numpy())
    assert back["master_weights"]["step"].dtype == paddle.int64 and int(back["master_weights"]["step"]) == 7
    assert back["LR_Scheduler"] == tree["LR_Scheduler"]
    assert back["scaler"]["scale"].dtype == np.float32 and back["scaler"]["incr_count"] == 5
    assert isinstance(back["odd"], tuple) and back["odd"][0] == np.float64(0.1) and np.isnan(back["odd"][1])
    assert back["odd"][2:] == (float("-inf"), None, ["x", 1])


def test_rng_states_restore_the_same_draws():
    paddle.seed(11)
    numpy_rng = np.random.RandomState(11)
    paddle.rand([5]), numpy_rng.rand(3), random.random()
    saved = round_trip({"python": random.getstate(), "numpy": numpy_rng.get_state(), "paddle": paddle.get_rng_state()})
    expected = (paddle.rand([8]).numpy(), paddle.randn([4]).numpy(), numpy_rng.permutation(20), random.random())
    paddle.seed(0), random.seed(0)
    paddle.set_rng_state(saved["paddle"])
    numpy_rng = np.random.RandomState(0)
    numpy_rng.set_state(saved["numpy"])
    random.setstate(saved["python"])
    got = (paddle.rand([8]).numpy(), paddle.randn([4]).numpy(), numpy_rng.permutation(20), random.random())
    for want, have in zip(expected, got):
        np.testing.assert_array_equal(have, want)


def test_an_optimizer_with_a_learning_rate_schedule_restores_through_set_state_dict():
    def train(steps: int, saved: dict | None = None):
        paddle.seed(3)
        with paddle.utils.unique_name.guard():  # the parameter and accumulator names of a new process
            layer = paddle.nn.Linear(4, 2)
            schedule = paddle.optimizer.lr.StepDecay(learning_rate=0.1, step_size=1, gamma=0.5)
            optimizer = paddle.optimizer.Adam(learning_rate=schedule, parameters=layer.parameters())
            if saved is not None:
                layer.set_state_dict(saved["model"])
                optimizer.set_state_dict(saved["optimizer"])
            for _ in range(steps):
                layer(paddle.ones([3, 4])).sum().backward()
                optimizer.step()
                optimizer.clear_grad()
                schedule.step()
        return layer, schedule, {"model": dict(layer.state_dict()), "optimizer": optimizer.state_dict()}

    whole, _, _ = train(2)
    _, _, after_one = train(1)
    resumed, schedule, _ = train(1, round_trip(after_one))
    assert schedule.last_epoch == 2
    for name, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[name].numpy(), value.numpy(), err_msg=name)


@pytest.mark.parametrize("tree", [object(), {1: "int key"}, np.array([object()], dtype=object)],
                         ids=["object", "int-key", "object-array"])
def test_what_would_need_pickle_cannot_be_saved(tree):
    with pytest.raises(TypeError, match="checkpoint"):
        flatten(tree, {})


def test_pickled_or_unknown_bytes_are_refused_as_arrays():
    import io
    import pickle

    buffer = io.BytesIO()
    np.savez(buffer, a0=np.array([{"x": 1}], dtype=object))
    for data in (pickle.dumps({"x": 1}), buffer.getvalue(), b"not an archive"):
        with pytest.raises(ValueError):
            from_npz_bytes(data)
    with pytest.raises(ValueError, match="unknown checkpoint skeleton kind"):
        unflatten({"kind": "pickle", "key": "a0"}, {})
