"""O2 export guarantee: the shipped parameters are the optimizer's float32 master weights, all float32.

Paddle has no float16 conv2d or adam kernels on CPU, so an O2 step cannot run here. The test
builds the O2 path as far as the CPU allows (real `paddle.amp.decorate(level='O2',
master_weight=True, save_dtype='float32')`, a multi-precision Adam) and then puts the model in
the state O2 training leaves it in on a GPU (on CPU, decorate itself changes nothing): float16 conv/linear parameters, whose float32
master copies live in the optimizer (set through the optimizer's own `set_state_dict`).
"""

import numpy as np
import paddle
import pytest

from quantgate.config import AmpConfig
from quantgate.int8.static_graph import load_program, persistable_dtypes, static_mode
from quantgate.models.models import build_model
from quantgate.samples.reading import open_data
from quantgate.stages.export.inference_model import export
from quantgate.stages.train import amp
from quantgate.stages.train.parts import reference_logits


@pytest.fixture()
def o2_state(stage_dirs):
    data = open_data(stage_dirs.data)
    paddle.seed(0)
    model = build_model("digits_cnn", data.num_classes, data.input_shape)
    optimizer = paddle.optimizer.Adam(learning_rate=1e-3, parameters=model.parameters(), multi_precision=True)
    model, optimizer = amp.decorate(model, optimizer, AmpConfig(level="O2"))
    low = [layer for layer in model.sublayers() if isinstance(layer, (paddle.nn.Conv2D, paddle.nn.Linear))]
    rng = np.random.default_rng(0)
    masters = {}
    for layer in low:
        for param in layer.parameters():
            # float32 values that float16 cannot hold exactly, like trained master weights
            masters[param.name] = (param.numpy() + rng.normal(0, 1e-3, param.shape)).astype(np.float32)
        layer.to(dtype="float16")
    optimizer.set_state_dict({"master_weights": {name: paddle.to_tensor(value) for name, value in masters.items()}})
    return stage_dirs.data, model, optimizer, masters


def test_float32_state_takes_the_master_weights_not_the_float16_parameters(o2_state):
    _, model, optimizer, masters = o2_state
    assert {str(param.dtype) for param in model.parameters() if not param.stop_gradient} >= {"paddle.float16"}
    weights, source = amp.float32_state(model, optimizer)
    assert source == "optimizer_master_weights"
    assert {array.dtype for array in weights.values()} == {np.dtype("float32")}
    by_name = {structured: param.name for structured, param in model.named_parameters()}
    saved = model.state_dict()  # the float16 shadows (on a GPU, save_dtype='float32' casts them to float32)
    for structured, array in weights.items():
        if by_name.get(structured) in masters:
            np.testing.assert_array_equal(array, masters[by_name[structured]])
            shadow = saved[structured].astype("float32").numpy()
            assert not np.array_equal(shadow, array)  # exporting the shadows would ship rounded weights


def test_export_ships_the_masters_and_only_float32(o2_state, tmp_path):
    data_dir, model, optimizer, masters = o2_state
    weights, _ = amp.float32_state(model, optimizer)
    np.savez(tmp_path / "weights.npz", **weights)
    np.save(tmp_path / "reference.npy", reference_logits(weights, open_data(data_dir)))
    out = tmp_path / "export"
    out.mkdir()
    result = export(tmp_path / "weights.npz", tmp_path / "reference.npy", data_dir, "digits_cnn", out)
    assert result.metrics["parameter_dtypes"] == ["float32"]
    with static_mode():
        loaded = load_program(out / "model")
        dtypes = persistable_dtypes(loaded.program)
        stored = [np.array(loaded.scope.find_var(name).get_tensor()) for name in dtypes]
    assert dtypes and set(dtypes.values()) == {"float32"}
    for master in masters.values():
        assert any(array.shape == master.shape and np.array_equal(array, master) for array in stored)
