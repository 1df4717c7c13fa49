"""`release(resume=...)` and `quantgate run --resume`: continue a version's training in a new version."""

import json
import math

import pytest

from quantgate.artifacts import ArtifactNotFound, ArtifactStore
from quantgate.cli import main
from quantgate.flows.release import release

# These tests are about checkpoints, not the INT8 gate: a one-epoch CNN's INT8 lost 1.1 points on an AVX2-only CPU
# and its gate failed before a checkpoint was ever read (measured), so any INT8 passes here.
ANY_INT8 = {"min_speedup": 0.0, "max_accuracy_drop": 100.0, "min_agreement": 0.0}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, tiny_config):
    root = tmp_path_factory.mktemp("store")
    first = release(config=tiny_config(train={"epochs": 1}, gate=ANY_INT8), store=str(root))
    second = release(config=tiny_config(train={"epochs": 2}, gate=ANY_INT8), store=str(root), resume=first)
    return root, first, second


def test_the_new_version_continues_from_the_latest_checkpoint(resumed):
    root, first, second = resumed
    assert (first, second) == ("v1", "v2")
    store = ArtifactStore(root)
    train = store.read_manifest(store.stage_ref(store.version("digits-cnn", "v2"), "train"))["metrics"]
    assert train["resumed_from"]["version"] == "v1" and train["resumed_from"]["checkpoint"] == "epoch-0001"
    assert train["resumed_from_epoch"] == 1 and train["epochs_trained_in_this_run"] == 1
    samples = store.read_manifest(store.stage_ref(store.version("digits-cnn", "v2"), "data"))["metrics"]["samples_train"]
    assert train["scaler"]["steps"] == train["steps"] == 2 * math.ceil(samples / 64)  # the record covers both epochs
    assert [ref.name for ref in store.checkpoints(store.version("digits-cnn", "v2"), "train")] == ["epoch-0002"]
    record = json.loads((root / "digits-cnn" / "versions" / "v2" / "version.json").read_text())
    assert record["status"] == "passed" and record["scaler"]["skipped_steps"] == 0


def test_resume_of_an_unknown_version_creates_nothing(resumed, tiny_config):
    root, _, _ = resumed
    with pytest.raises(ArtifactNotFound, match="has no version v9"):
        release(config=tiny_config(train={"epochs": 2}, gate=ANY_INT8), store=str(root), resume="v9")
    assert [info.version for info in ArtifactStore(root).versions("digits-cnn")] == ["v1", "v2"]


def test_the_cli_refuses_a_resume_that_cannot_continue(resumed, capsys):
    root, _, _ = resumed
    assert main(["run", "--store", str(root), "--resume", "v1", "--epochs", "1", "--learning-rate", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "--resume v1 (checkpoint epoch-0001): train.learning_rate" in err
    assert "raise train.epochs above 1" in err
    assert main(["run", "--store", str(root), "--resume", "v7", "--epochs", "3"]) == 2
    assert "--resume v7: model 'digits-cnn' has no version v7" in capsys.readouterr().err
    assert [info.version for info in ArtifactStore(root).versions("digits-cnn")] == ["v1", "v2"]


def test_a_malformed_checkpoint_manifest_is_reported_as_corrupt_not_a_traceback(tmp_path, capsys):
    store = ArtifactStore(tmp_path / "store")
    version = store.create_version("digits-cnn")  # an interrupted run: no version.json, one checkpoint
    with store.write_checkpoint(version, "train", "epoch-0001") as writer:
        (writer.dir / "state.json").write_text("{}")
    manifest = tmp_path / "store" / "digits-cnn" / "versions" / "v1" / "checkpoints" / "train" / "epoch-0001" \
        / "manifest.json"
    manifest.chmod(0o644)
    manifest.write_bytes(manifest.read_bytes()[:-30])  # cut short, as a crashed editor would leave it
    assert main(["run", "--store", str(tmp_path / "store"), "--resume", "v1", "--epochs", "2"]) == 3
    err = capsys.readouterr().err
    assert f"{manifest} (the manifest of checkpoint 'epoch-0001' of model 'digits-cnn' v1 stage 'train') " \
           "is not valid JSON" in err
    assert "run `quantgate fsck`" in err and "Traceback" not in err
    assert [info.version for info in store.versions("digits-cnn")] == ["v1"]  # nothing new was started
