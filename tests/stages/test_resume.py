"""Per-epoch checkpoints in the store, and resuming them into weights identical to an uninterrupted run."""

import io
import pickle
from contextlib import contextmanager

import numpy as np
import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactStore
from quantgate.artifacts.checkpoints import read_checkpoint
from quantgate.config import TrainConfig
from quantgate.stages.train.checkpoint_state import CheckpointBytes
from quantgate.stages.train.errors import ResumeMismatch
from quantgate.stages.train.loop import train

# No pickle: arrays in .npz (read with allow_pickle=False), the rest JSON and CSV.
EXPECTED_FILES = {"model.npz", "weights.npz", "optimizer.npz", "scaler.npz", "rng.npz", "steps.csv", "state.json"}


def run(store, config, splits, tmp_path, label, resume=None):
    """Train into a new version of `store`, checkpointing every epoch like the train task does."""
    version = store.create_version("digits-cnn")

    @contextmanager
    def sink(name):
        with store.write_checkpoint(version, "train", name) as writer:
            yield writer.dir

    out = tmp_path / label
    out.mkdir()
    saved = CheckpointBytes(resume.name, read_checkpoint(resume)) if resume is not None else None
    result = train(config, splits, out, checkpoints=sink, resume_from=saved)
    return version, out, result


def arrays(path):
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}


@pytest.fixture(scope="module")
def runs(stage_dirs, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("resume")
    store = ArtifactStore(tmp_path / "store")
    whole = run(store, TrainConfig(epochs=2), stage_dirs.data, tmp_path, "whole")
    first = run(store, TrainConfig(epochs=1), stage_dirs.data, tmp_path, "first")
    resumed = run(store, TrainConfig(epochs=2), stage_dirs.data, tmp_path, "resumed",
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
    rng_file = store.verify_checkpoint(ref) / "rng.npz"
    rng_file.chmod(0o644)
    original = rng_file.read_bytes()
    try:
        rng_file.write_bytes(original + b"\0")
        with pytest.raises(ArtifactCorrupt, match="rng.npz .* does not match its manifest"):
            store.verify_checkpoint(ref)
    finally:
        rng_file.write_bytes(original)


def test_other_settings_or_no_epochs_left_are_refused(runs, stage_dirs, tmp_path):
    store, _, (version, _, _), _ = runs
    ref = store.latest_checkpoint(version, "train")
    saved = CheckpointBytes(ref.name, read_checkpoint(ref))
    with pytest.raises(ResumeMismatch) as refused:
        train(TrainConfig(epochs=1, learning_rate=0.01), stage_dirs.data, tmp_path, resume_from=saved)
    assert "train.learning_rate: the checkpoint was trained with 0.002, this run asks for 0.01" in str(refused.value)
    assert "raise train.epochs above 1" in str(refused.value)


class WritesMarker:
    """A pickle payload: unpickling it creates `path` (any code could run there instead)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def pickle_payloads(marker):
    """Bytes an attacker could put in place of an .npz: a bare pickle, and an .npz of an object array."""
    bare = pickle.dumps(WritesMarker(marker))
    buffer = io.BytesIO()
    np.savez(buffer, a0=np.array([WritesMarker(marker)], dtype=object))
    return {"bare-pickle": bare, "object-array-npz": buffer.getvalue()}


@pytest.mark.parametrize("part", ["model.npz", "optimizer.npz", "scaler.npz", "rng.npz", "weights.npz"])
def test_a_checkpoint_array_file_carrying_a_pickle_is_refused_and_never_unpickled(runs, stage_dirs, tmp_path, part):
    store, _, (version, _, _), _ = runs
    ref = store.latest_checkpoint(version, "train")
    control = tmp_path / "control"
    pickle.loads(pickle_payloads(control)["bare-pickle"])
    assert control.exists()  # the payload is live: loading it runs code
    marker = tmp_path / "unpickled"
    for kind, payload in pickle_payloads(marker).items():
        # what read_checkpoint would hand over for a forged checkpoint whose manifest and seal match
        forged = CheckpointBytes(ref.name, {**read_checkpoint(ref), part: payload})
        if part == "weights.npz":  # shipped for inspection only: resuming never reads it
            (tmp_path / kind).mkdir()
            train(TrainConfig(epochs=2), stage_dirs.data, tmp_path / kind, resume_from=forged)
        else:
            with pytest.raises(ResumeMismatch, match=f"its {part} does not match its state.json"):
                train(TrainConfig(epochs=2), stage_dirs.data, tmp_path, resume_from=forged)
        assert not marker.exists(), f"{kind} in {part} was unpickled"


def test_training_loads_the_verified_bytes_not_the_files_again(runs, stage_dirs, tmp_path):
    """Files swapped on disk after the check cannot reach the model: the loader never reopens them."""
    store, (_, whole, _), (version, _, _), _ = runs
    ref = store.latest_checkpoint(version, "train")
    saved = CheckpointBytes(ref.name, read_checkpoint(ref))
    folder = store.verify_checkpoint(ref)
    originals = {name: (folder / name).read_bytes() for name in ("model.npz", "optimizer.npz", "rng.npz")}
    try:
        for name in originals:  # between the check and the load, someone swaps the files
            (folder / name).chmod(0o644)
            (folder / name).write_bytes(pickle.dumps(WritesMarker(tmp_path / "unpickled")))
        train(TrainConfig(epochs=2), stage_dirs.data, tmp_path, resume_from=saved)
    finally:
        for name, data in originals.items():
            (folder / name).write_bytes(data)
    expected, got = arrays(whole / "weights.npz"), arrays(tmp_path / "weights.npz")
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert not (tmp_path / "unpickled").exists()


def test_a_pickle_based_checkpoint_of_an_older_quantgate_is_refused(runs, stage_dirs, tmp_path):
    store, _, (version, _, _), _ = runs
    ref = store.latest_checkpoint(version, "train")
    files = dict(read_checkpoint(ref))
    files["model.pdparams"] = pickle.dumps(WritesMarker(tmp_path / "unpickled"))
    with pytest.raises(ResumeMismatch, match="not the pickle-free files"):
        train(TrainConfig(epochs=2), stage_dirs.data, tmp_path, resume_from=CheckpointBytes(ref.name, files))
    assert not (tmp_path / "unpickled").exists()
