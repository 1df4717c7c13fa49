"""A forged checkpoint, self-consistent down to its seal, can carry a pickle: resuming must never unpickle it.

A checkpoint's only pin is the sha256 of its own manifest, and the manifest's seal is a plain sha256:
anyone who can write the store can recompute both. The defence is that a checkpoint holds no pickle
and the loader reads none, so these tests forge the checkpoint the way such a writer would.
"""

import hashlib
import json
import pickle
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactStore
from quantgate.cli import main
from quantgate.flows.release import release

# These tests are about checkpoints, not the INT8 gate: a one-epoch CNN's INT8 lost 1.1 points on an AVX2-only CPU
# and its gate failed before a checkpoint was ever read (measured), so any INT8 passes here.
ANY_INT8 = {"min_speedup": 0.0, "max_accuracy_drop": 100.0, "min_agreement": 0.0}
from quantgate.stages.train.errors import ResumeMismatch

# Every file name a pickle-based loader (paddle.load, pickle.load) or the .npz loader would open.
PICKLE_NAMES = ("model.pdparams", "optimizer.pdopt", "scaler.pdscaler", "rng.pkl")
ARRAY_NAMES = ("model.npz", "optimizer.npz", "scaler.npz", "rng.npz", "weights.npz")


class WritesMarker:
    """Unpickling it creates `path`: a stand-in for any code an attacker would run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def canonical(record: dict) -> bytes:
    return (json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n").encode()


def forge(folder: Path, files: dict[str, bytes]) -> None:
    """Replace a committed checkpoint's files and write a manifest whose hashes and seal match them."""
    record = json.loads((folder / "manifest.json").read_bytes())
    for entry in folder.iterdir():
        entry.unlink()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    record.pop("record_sha256", None)
    record["files"] = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                       for name, data in files.items()}
    record["record_sha256"] = hashlib.sha256(canonical(record)).hexdigest()  # no secret: anyone can seal
    (folder / "manifest.json").write_bytes(canonical(record))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_config):
    """A store whose v1 trained one epoch; its checkpoint epoch-0001 is the one the tests forge."""
    root = tmp_path_factory.mktemp("store")
    assert release(config=tiny_config(train={"epochs": 1}, gate=ANY_INT8), store=str(root)) == "v1"
    folder = root / "digits-cnn" / "versions" / "v1" / "checkpoints" / "train" / "epoch-0001"
    genuine = {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.name != "manifest.json"}
    return root, folder, genuine


@pytest.mark.parametrize("names", [PICKLE_NAMES + ARRAY_NAMES, ARRAY_NAMES], ids=["pickle-files", "npz-files"])
def test_a_forged_checkpoint_carrying_a_pickle_is_never_unpickled(finished, tiny_config, tmp_path, names):
    root, folder, genuine = finished
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(WritesMarker(marker))
    forge(folder, {**{name: genuine[name] for name in ("state.json", "steps.csv") if name in genuine},
                   **{name: payload for name in names}})
    with pytest.raises(ResumeMismatch, match="cannot resume from checkpoint epoch-0001|checkpoint epoch-0001 holds"):
        release(config=tiny_config(train={"epochs": 2}, gate=ANY_INT8), store=str(root), resume="v1")
    assert not marker.exists(), "resuming unpickled a file of the forged checkpoint"


def test_the_cli_refuses_a_forged_pickle_checkpoint_before_a_version_exists(finished, tmp_path, capsys):
    root, folder, genuine = finished
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(WritesMarker(marker))
    forge(folder, {"state.json": genuine["state.json"], "steps.csv": genuine["steps.csv"],
                   **{name: payload for name in PICKLE_NAMES}})
    before = [info.version for info in ArtifactStore(root).versions("digits-cnn")]
    assert main(["run", "--store", str(root), "--resume", "v1", "--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "--resume v1: checkpoint epoch-0001 holds" in err and "never loaded" in err
    assert not marker.exists()
    assert [info.version for info in ArtifactStore(root).versions("digits-cnn")] == before
