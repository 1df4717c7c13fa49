"""A PIR export (Paddle 3's default) is recognised and refused with the commands that write the legacy
format; the models are real paddle.jit.save outputs written in subprocesses, since FLAGS_enable_pir_api
is read once, when paddle is first imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quantgate.stages.source.pir import is_pir_model, pir_refusal

SAVE_TINY_MODEL = """
import sys, paddle
paddle.seed(0)
net = paddle.nn.Sequential(
    paddle.nn.Conv2D(3, 4, 3), paddle.nn.ReLU(), paddle.nn.Flatten(), paddle.nn.Linear(4 * 14 * 14, 5))
net.eval()
spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")]
if sys.argv[2:] == ["old-ir-guard"]:
    with paddle.pir_utils.DygraphOldIrGuard():
        paddle.jit.save(net, sys.argv[1], input_spec=spec)
else:
    paddle.jit.save(net, sys.argv[1], input_spec=spec)
"""

# What a user would try first: load the PIR model and save it again with the legacy IR switched on.
RESAVE_AS_LEGACY = """
import sys, paddle
layer = paddle.jit.load(sys.argv[1])
with paddle.pir_utils.DygraphOldIrGuard():
    paddle.jit.save(layer, sys.argv[2], input_spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")])
"""


def run_paddle(script: str, pir: bool, *args: Path | str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLAGS_enable_pir_api": "1" if pir else "0"}
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """The same seeded layer saved with PIR on, with it off, and with it on but inside the old-IR guard."""
    root = tmp_path_factory.mktemp("exports")
    runs = {"pir": (True,), "legacy": (False,), "guarded": (True, "old-ir-guard")}
    for kind, (pir, *mode) in runs.items():
        saved = run_paddle(SAVE_TINY_MODEL, pir, root / kind / "inference", *mode)
        assert saved.returncode == 0, saved.stderr[-2000:]
    return {kind: root / kind for kind in runs}


def test_jit_save_writes_json_with_pir_on_and_pdmodel_with_it_off_or_in_the_old_ir_guard(exports):
    assert sorted(p.name for p in exports["pir"].iterdir()) == ["inference.json", "inference.pdiparams"]
    assert (exports["legacy"] / "inference.pdmodel").is_file()
    assert not (exports["legacy"] / "inference.json").exists()
    assert (exports["guarded"] / "inference.pdmodel").is_file() and not is_pir_model(exports["guarded"], "inference")
    # the parameters travel unchanged; only the program format differs
    pir_params = (exports["pir"] / "inference.pdiparams").read_bytes()
    assert pir_params == (exports["legacy"] / "inference.pdiparams").read_bytes()


def test_pir_export_is_refused_with_the_commands_that_write_the_legacy_format(exports):
    folder = exports["pir"]
    assert is_pir_model(folder, "inference")
    message = pir_refusal(folder, "inference")
    assert str(folder) in message and "inference.json" in message and "inference.pdiparams" in message
    assert "PaddleSlim 2.6" in message and "paddle2onnx 1.3.1" in message
    assert ("FLAGS_enable_pir_api=0 python tools/export_model.py -c CONFIG.yml -o Global.pretrained_model="
            in message)
    assert "Global.export_with_pir=False" in message
    assert "FLAGS_json_format_model=0 FLAGS_enable_pir_api=0 python main.py" in message
    assert "paddle.jit.save" in message


def test_legacy_export_is_not_pir(exports):
    assert not is_pir_model(exports["legacy"], "inference")
    assert not is_pir_model(exports["pir"], "model")  # another prefix: nothing there


def test_paddle_cannot_resave_a_pir_model_in_the_legacy_format(exports, tmp_path):
    # The reason for refusing rather than converting; if a Paddle upgrade makes this work, convert instead.
    resaved = run_paddle(RESAVE_AS_LEGACY, True, exports["pir"] / "inference", tmp_path / "inference")
    assert resaved.returncode != 0
    assert "IrMapping" in resaved.stderr
    assert not (tmp_path / "inference.pdmodel").exists()
