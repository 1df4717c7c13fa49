"""Multi-process training failures: a failing rank is reported with the tail of its own log."""

import os
import shutil
from pathlib import Path

import pytest
from paddle import nn

from quantgate.config import TrainConfig
from quantgate.stages.train.distributed import weights_sha256
from quantgate.stages.train.errors import DistributedTrainingFailed, ModelError
from quantgate.stages.train.loop import train


def fails_on_rank_one(num_classes, input_shape):
    """A user network whose construction breaks on rank 1 only (the launcher sets PADDLE_TRAINER_ID)."""
    if os.environ.get("PADDLE_TRAINER_ID") == "1":
        raise RuntimeError("simulated failure on rank 1")
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0] * input_shape[1] * input_shape[2], num_classes))


def test_a_failing_rank_raises_with_the_tail_of_its_log(stage_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    config = TrainConfig(epochs=1, nproc=2, architecture="test_train_distributed:fails_on_rank_one")
    with pytest.raises(ModelError) as caught:  # the error rank 1 raised, as one process would have
        train(config, stage_dirs.splits, tmp_path)
    message = str(caught.value)
    assert "rank(s) [1] failed, rank(s) [0] stopped with them" in message
    assert "simulated failure on rank 1" in message  # from rank 1's own log
    assert "workerlog.1" in message
    kept = Path(message.split("full logs in ")[1].split("\n")[0])  # outside the discarded stage folder
    assert "simulated failure on rank 1" in (kept / "workerlog.1").read_text()
    shutil.rmtree(kept.parent)
    assert not (tmp_path / "weights.npz").exists()


def test_resuming_is_single_process_only(stage_dirs, tmp_path):
    from quantgate.stages.train.errors import ResumeMismatch

    with pytest.raises(ResumeMismatch, match="resume with train.nproc=1"):
        train(TrainConfig(nproc=2), stage_dirs.splits, tmp_path, resume_from=tmp_path / "checkpoint")
    assert list(tmp_path.iterdir()) == []  # refused before launching anything


def test_a_rank_killed_by_something_else_is_a_distributed_failure():
    from quantgate.stages.train.distributed import _rank_error_class

    assert _rank_error_class("rank 1: Segmentation fault") is DistributedTrainingFailed
    assert _rank_error_class("quantgate.stages.train.errors.TrainingDiverged: training diverged").__name__ == "TrainingDiverged"


def test_weights_digest_sees_every_array():
    import numpy as np

    weights = {"a": np.zeros(3, np.float32), "b._mean": np.ones(2, np.float32)}
    changed = {**weights, "b._mean": np.array([1, 1.0001], np.float32)}
    assert weights_sha256(weights) == weights_sha256(dict(reversed(list(weights.items()))))
    assert weights_sha256(weights) != weights_sha256(changed)
