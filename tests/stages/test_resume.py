"""Per-epoch checkpoints in the store, and resuming them into weights identical to an uninterrupted run."""

from contextlib import contextmanager

import numpy as np
import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactStore
from quantgate.config import TrainConfig
from quantgate.stages.train.errors import ResumeMismatch
from quantgate.stages.train.loop import train

EXPECTED_FILES = {"model.pdparams", "weights.npz", "optimizer.pdopt", "scaler.pdscaler", "rng.pkl",
                  "steps.csv", "state.json"}


def run(store, config, splits, tmp_path, label, resume=None):
    """Train into a new version of `store`, checkpointing every epoch like the train task does."""
    version = store.create_version("digits-cnn")

    @contextmanager
    def sink(name):
        with store.write_checkpoint(version, "train", name) as writer:
            yield writer.dir

    out = tmp_path / label
    out.mkdir()
    resume_dir = store.verify_checkpoint(resume) if resume is not None else None
    result = train(config, splits, out, checkpoints=sink, resume_from=resume_dir)
    return version, out, result


def arrays(path):
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}


@pytest.fixture(scope="module")
def runs(stage_dirs, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("resume")
    store = ArtifactStore(tmp_path / "store")
    whole = run(store, TrainConfig(epochs=2), stage_dirs.splits, tmp_path, "whole")
    first = run(store, TrainConfig(epochs=1), stage_dirs.splits, tmp_path, "first")
    resumed = run(store, TrainConfig(epochs=2), stage_dirs.splits, tmp_path, "resumed",
                  resume=store.latest_checkpoint(first[0], "train"))
    return store, whole, first, resumed


def test_every_epoch_is_a_committed_checkpoint(runs):
    store, (version, _, _), _, _ = runs
    refs = store.checkpoints(version, "train")
    assert [ref.name for ref in refs] == ["epoch-0001", "epoch-0002"]
    folder = store.verify_checkpoint(refs[-1])
    assert {path.name for path in folder.iterdir()} == EXPECTED_FILES | {"manifest.json"}
    assert not list(folder.parent.glob(".staging-*"))


def test_resuming_gives_bit_identical_weights_and_steps(runs):
    _, (_, whole, whole_result), _, (_, resumed, resumed_result) = runs
    expected, got = arrays(whole / "weights.npz"), arrays(resumed / "weights.npz")
    assert sorted(expected) == sorted(got)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert (resumed / "steps.csv").read_bytes() == (whole / "steps.csv").read_bytes()
    assert resumed_result.metrics["resumed_from_epoch"] == 1
    assert resumed_result.metrics["epochs_trained_in_this_run"] == 1
    assert resumed_result.metrics["steps"] == whole_result.metrics["steps"]


def test_a_changed_checkpoint_is_refused_before_loading(runs, tmp_path):
    store, _, (version, _, _), _ = runs
    ref = store.latest_checkpoint(version, "train")
    rng_file = store.verify_checkpoint(ref) / "rng.pkl"
    rng_file.chmod(0o644)
    original = rng_file.read_bytes()
    try:
        rng_file.write_bytes(original + b"\0")
        with pytest.raises(ArtifactCorrupt, match="rng.pkl .* does not match its manifest"):
            store.verify_checkpoint(ref)
    finally:
        rng_file.write_bytes(original)


def test_other_settings_or_no_epochs_left_are_refused(runs, stage_dirs, tmp_path):
    store, _, (version, _, _), _ = runs
    folder = store.verify_checkpoint(store.latest_checkpoint(version, "train"))
    with pytest.raises(ResumeMismatch) as refused:
        train(TrainConfig(epochs=1, learning_rate=0.01), stage_dirs.splits, tmp_path, resume_from=folder)
    assert "train.learning_rate: the checkpoint was trained with 0.002, this run asks for 0.01" in str(refused.value)
    assert "raise train.epochs above 1" in str(refused.value)
