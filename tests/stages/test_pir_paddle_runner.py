"""Paddle Inference reads a PIR program batch by batch in one long-lived child process (the evaluate stage's FP32
reading of a PIR model): the same outputs as a one-off child, several batches of different sizes through one
predictor, and a program Paddle cannot load named in a clear error, with the child gone."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_source_pir import SAVE_TINY_MODEL, run_paddle

from quantgate.pir.children import paddle_outputs
from quantgate.pir.errors import PirProblem
from quantgate.pir.paddle_runner import CHUNK, PirPaddleRunner


@pytest.fixture(scope="module")
def pir_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pir-runner") / "model"
    saved = run_paddle(SAVE_TINY_MODEL, True, folder / "inference")
    assert saved.returncode == 0, saved.stderr[-2000:]
    return folder


def test_batches_of_any_size_give_paddles_own_outputs_through_one_child(pir_folder):
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((size, 3, 16, 16)).astype(np.float32) for size in (CHUNK * 2 + 1, 1, 3)]
    runner = PirPaddleRunner(pir_folder / "inference.json", pir_folder / "inference.pdiparams")
    try:
        outputs = [runner(batch) for batch in batches]
        child = runner._child
        assert child.poll() is None  # one child served every batch
        assert isinstance(runner.how_it_ran()["onednn"], bool)
    finally:
        runner.close()
    assert child.poll() is not None
    for batch, output in zip(batches, outputs, strict=True):
        expected, _ = paddle_outputs(pir_folder / "inference.json", pir_folder / "inference.pdiparams", batch)
        assert output.shape == (len(batch), 5)
        np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)


def test_a_program_paddle_cannot_load_is_named_and_the_child_is_gone(pir_folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(pir_folder, broken)
    (broken / "inference.pdiparams").write_bytes(b"not parameters")
    runner = PirPaddleRunner(broken / "inference.json", broken / "inference.pdiparams")
    try:
        with pytest.raises(PirProblem, match="Paddle Inference cannot run the PIR program .*broken"):
            runner(np.zeros((2, 3, 16, 16), np.float32))
    finally:
        runner.close()
    assert runner._child.poll() is not None
