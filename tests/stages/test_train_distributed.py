"""Multi-process training: an image folder streamed by every rank, the same data checked on every rank,
and a failing rank reported with the tail of its own log."""

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from paddle import nn
from test_train_streaming import AUGMENT, image_folder_data

from quantgate.config import TrainConfig
from quantgate.stages.data import open_data
from quantgate.stages.train.distributed import _rank_error_class, check_same_data, launch_command, weights_sha256
from quantgate.stages.train.errors import DistributedTrainingFailed, ModelError, RankDataMismatch
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
        train(config, stage_dirs.data, tmp_path)
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
        train(TrainConfig(nproc=2), stage_dirs.data, tmp_path, resume_from=tmp_path / "checkpoint")
    assert list(tmp_path.iterdir()) == []  # refused before launching anything


def test_a_rank_killed_by_something_else_is_a_distributed_failure():
    assert _rank_error_class("rank 1: Segmentation fault") is DistributedTrainingFailed
    raised = _rank_error_class("quantgate.stages.train.errors.TrainingDiverged: training diverged")
    assert raised.__name__ == "TrainingDiverged"


def test_weights_digest_sees_every_array():
    import numpy as np

    weights = {"a": np.zeros(3, np.float32), "b._mean": np.ones(2, np.float32)}
    changed = {**weights, "b._mean": np.array([1, 1.0001], np.float32)}
    assert weights_sha256(weights) == weights_sha256(dict(reversed(list(weights.items()))))
    assert weights_sha256(weights) != weights_sha256(changed)


def test_two_ranks_stream_an_augmented_image_folder_and_agree(tmp_path):
    data_dir = image_folder_data(tmp_path / "folder", AUGMENT)
    out = tmp_path / "out"
    out.mkdir()
    metrics = train(TrainConfig(epochs=2, batch_size=16, nproc=2), data_dir, out, num_workers=1).metrics
    distributed = metrics["distributed"]
    assert distributed["world_size"] == 2 and distributed["ranks_identical"] is True
    assert len(set(distributed["rank_weights_sha256"].values())) == 1
    with np.load(out / "weights.npz") as stored:
        assert weights_sha256({name: stored[name] for name in stored.files}) == distributed["rank_weights_sha256"]["0"]
    assert metrics["data_loader"] == {"num_workers": 1, "on_disk": True}
    assert metrics["augmentation"]["enabled"] is True and metrics["augmentation"]["horizontal_flip"] is True
    data = open_data(data_dir)
    # Each rank trained on its half of the train split (DistributedBatchSampler), every epoch.
    assert metrics["steps"] == 2 * math.ceil(math.ceil(data.size("train") / 2) / 16)
    assert np.load(out / "reference_logits.npy").shape == (data.size("test"), 3)


def test_a_rank_that_sees_other_data_stops_naming_both_digests_and_the_fix(tmp_path):
    data = open_data(image_folder_data(tmp_path))
    check_same_data(data, data.digest, rank=1)  # the same data: nothing to say
    with pytest.raises(RankDataMismatch) as caught:
        check_same_data(data, "0" * 64, rank=1)
    message = str(caught.value)
    assert message.startswith("rank 1 reads other data") and data.digest in message and "0" * 64 in message
    assert str(data.folder) in message and "every machine must see the same data folder" in message
    assert caught.value.exit_code == 2


def test_launched_ranks_check_the_digest_the_launcher_passes(tmp_path):
    """The ranks' own command line: given another digest than their data folder's, every rank refuses to train."""
    data_dir = image_folder_data(tmp_path / "folder")
    config_file = tmp_path / "train_config.json"
    config_file.write_text(json.dumps(TrainConfig(nproc=2).model_dump(mode="json")))
    (tmp_path / "out" / "launch").mkdir(parents=True)
    args = ["--config", str(config_file), "--data", str(data_dir), "--data-digest", "f" * 64,
            "--out", str(tmp_path / "out")]
    finished = subprocess.run(launch_command(2, tmp_path / "logs", args), capture_output=True, text=True)
    assert finished.returncode != 0
    for rank in (0, 1):
        log = (tmp_path / "logs" / f"workerlog.{rank}").read_text()
        assert f"RankDataMismatch: rank {rank} reads other data" in log and "f" * 64 in log
        assert _rank_error_class(log) is RankDataMismatch  # what the stage re-raises in the launching process
    assert not list((tmp_path / "out" / "launch").iterdir())  # no rank trained or finished
