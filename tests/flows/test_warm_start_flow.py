"""`train.init_from` through the release flow and `quantgate run`: fine-tuning from the release, and every refusal."""

import csv
import hashlib
import pickle
from collections import defaultdict

import numpy as np
import paddle
import pytest

from quantgate.artifacts import RELEASE, ArtifactStore
from quantgate.cli import main
from quantgate.config import validate_config
from quantgate.flows.publishing import GateFailed
from quantgate.flows.release import release
from quantgate.flows.warm_start import WarmStartRefused, resolve_warm_start
from quantgate.stages.train.outputs import INIT_FROM, STEPS_FILE, WEIGHTS_FILE

MODEL = "digits-cnn"
TINY_RUN = ["--epochs", "3", "--set", "evaluate.latency_repeats=3", "--set", "gate.min_speedup=0",
            "--set", "quantize.strategy=single"]


def train_stage(store, version):
    return store.finalized_stage_ref(store.version(MODEL, version), "train")


def epoch_losses(store, version):
    """Mean training loss per epoch of a version's train stage, from its verified steps.csv."""
    losses = defaultdict(list)
    with open(store.verify_stage(train_stage(store, version)) / STEPS_FILE, newline="") as handle:
        for row in csv.DictReader(handle):
            losses[int(row["epoch"])].append(float(row["loss"]))
    return [float(np.mean(losses[epoch])) for epoch in sorted(losses)]


def release_weights(store, version):
    """The bytes and arrays of a version's trained float32 weights."""
    data = (store.verify_stage(train_stage(store, version)) / WEIGHTS_FILE).read_bytes()
    with np.load(store.verify_stage(train_stage(store, version)) / WEIGHTS_FILE, allow_pickle=False) as stored:
        return data, {name: stored[name] for name in stored.files}


def released(config, root):
    """Run the flow; the version's name whether or not the gate passed (the training is what is tested)."""
    try:
        return release(config=config, store=str(root))
    except GateFailed as failed:
        return failed.version


def versions(root):
    return [info.version for info in ArtifactStore(root).versions(MODEL)]


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory, tiny_config):
    """v1 trained from scratch and released; v2 trained from the release, as a nightly run would be."""
    root = tmp_path_factory.mktemp("store")
    first = release(config=tiny_config(), store=str(root))
    assert ArtifactStore(root).alias(MODEL, RELEASE) == first == "v1"
    second = released(tiny_config(train={"init_from": "release"}), root)
    return root, first, second


def test_a_run_from_the_release_starts_where_the_release_ended(fine_tuned):
    root, first, second = fine_tuned
    store = ArtifactStore(root)
    cold, warm = epoch_losses(store, first), epoch_losses(store, second)
    assert cold[0] > 0.5  # v1 started from scratch
    # v2's first epoch is already about where v1's last ended, nowhere near where v1 began.
    assert abs(warm[0] - cold[-1]) < 0.2 * (cold[0] - cold[-1])
    assert warm[0] < 0.3 * cold[0]


def test_the_train_manifest_records_the_release_weights_it_started_from(fine_tuned):
    root, first, second = fine_tuned
    store = ArtifactStore(root)
    data, _ = release_weights(store, first)
    manifest = store.read_manifest(train_stage(store, second))
    init = manifest["metrics"][INIT_FROM]
    assert {key: init[key] for key in ("source", "model", "version", "sha256", "strict", "fresh_keys")} == {
        "source": "release", "model": MODEL, "version": first, "sha256": hashlib.sha256(data).hexdigest(),
        "strict": True, "fresh_keys": []}
    # Computed, not reused: the init weights are part of the train stage's input digest.
    first_manifest = store.read_manifest(train_stage(store, first))
    assert manifest.get("reused_from") is None and manifest["input_digest"] != first_manifest["input_digest"]
    assert first_manifest["metrics"][INIT_FROM] is None
    assert store.version_record(store.version(MODEL, second))["config"]["train"]["init_from"] == "release"


@pytest.fixture(scope="module")
def imported_store(tmp_path_factory):
    """A store whose release v1 was imported (a "source" stage, no "train") and whose v2 errored before training."""
    root = tmp_path_factory.mktemp("imported")
    store = ArtifactStore(root)
    imported = store.create_version(MODEL)
    with store.write_stage(imported, "source", {"path": "/models/elsewhere"}, {}) as writer:
        (writer.dir / "inference.pdmodel").write_bytes(b"trained elsewhere")
    store.finalize_version(imported, {"status": "passed"})
    store.set_alias(MODEL, RELEASE, imported.version, reason="imported")
    store.finalize_version(store.create_version(MODEL), {"status": "error", "error": "DataError: no images"})
    return root


def refused_run(root, capsys, *args):
    """`quantgate run` with `args`; its exit code and stderr."""
    code = main(["run", "--store", str(root), *TINY_RUN, *args])
    return code, capsys.readouterr().err


def test_init_from_release_without_a_release_exits_2_and_creates_nothing(tmp_path, capsys):
    code, err = refused_run(tmp_path / "empty", capsys, "--set", "train.init_from=release")
    assert code == 2
    assert "train.init_from='release': model 'digits-cnn' has no release yet" in err
    assert "Run once without train.init_from" in err and "Traceback" not in err
    assert versions(tmp_path / "empty") == []


def test_an_imported_release_cannot_be_fine_tuned_here(imported_store, capsys):
    code, err = refused_run(imported_store, capsys, "--set", "train.init_from=release")
    assert code == 2
    assert "digits-cnn/v1 (the release) was imported, not trained here" in err
    assert "Fine-tune it with the tool that trained it" in err and "import the new export" in err
    assert versions(imported_store) == ["v1", "v2"]


@pytest.mark.parametrize(("init_from", "expected"), [
    ("v9", "train.init_from='v9': model 'digits-cnn' has no version v9"),
    ("v2", "digits-cnn/v2 has no train stage to start from"),
])
def test_a_version_that_does_not_exist_or_did_not_train_exits_2(imported_store, capsys, init_from, expected):
    code, err = refused_run(imported_store, capsys, "--set", f"train.init_from={init_from}")
    assert code == 2 and expected in err
    assert versions(imported_store) == ["v1", "v2"]


def test_a_state_dict_file_that_is_missing_or_not_an_npz_exits_2(fine_tuned, tmp_path, capsys):
    root, _, _ = fine_tuned
    before = versions(root)
    code, err = refused_run(root, capsys, "--set", f"train.init_from={tmp_path / 'gone.npz'}")
    assert code == 2 and f"no such file {tmp_path / 'gone.npz'}" in err
    (tmp_path / "garbage.npz").write_bytes(b"not a zip at all")
    code, err = refused_run(root, capsys, "--set", f"train.init_from={tmp_path / 'garbage.npz'}")
    assert code == 2 and "garbage.npz is not an .npz archive (a zip of .npy arrays)" in err
    assert versions(root) == before


def test_a_pdparams_file_needs_init_allow_pickle(fine_tuned, tmp_path, capsys):
    root, _, _ = fine_tuned
    before = versions(root)
    code, err = refused_run(root, capsys, "--set", f"train.init_from={tmp_path / 'w.pdparams'}")
    assert code == 2 and "is a pickle (.pdparams)" in err and "train.init_allow_pickle: true" in err
    assert versions(root) == before


def test_resume_and_init_from_together_are_refused(fine_tuned, tiny_config, capsys):
    root, first, _ = fine_tuned
    before = versions(root)
    code, err = refused_run(root, capsys, "--resume", first, "--set", "train.init_from=release")
    assert code == 2 and f"--resume {first} continues that version's checkpoint" in err and "pick one" in err
    with pytest.raises(WarmStartRefused, match="pick one"):  # a deployment's parameters reach the flow directly
        release(config=tiny_config(train={"init_from": "release"}), store=str(root), resume=first)
    assert versions(root) == before


def test_a_deployment_run_never_loads_a_pickle(tmp_path):
    marker = tmp_path / "the pickle ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "w.pdparams").write_bytes(pickle.dumps({"classifier.bias": Payload()}))
    config = validate_config({"train": {"init_from": str(tmp_path / "w.pdparams"), "init_allow_pickle": True}})
    with pytest.raises(WarmStartRefused) as refused:
        resolve_warm_start(ArtifactStore(tmp_path / "store"), config, None, from_deployment=True)
    assert refused.value.exit_code == 2
    message = str(refused.value)
    assert "a run started from a deployment never loads one, whatever train.init_allow_pickle says" in message
    assert not marker.exists() and versions(tmp_path / "store") == []


def test_a_state_dict_that_does_not_fit_lists_its_keys(fine_tuned, tmp_path, capsys):
    root, first, _ = fine_tuned
    _, arrays = release_weights(ArtifactStore(root), first)
    del arrays["classifier.bias"]
    arrays["features.0.bias"] = np.zeros(31, np.float32)
    np.savez(tmp_path / "w.npz", **arrays)
    released_before = ArtifactStore(root).alias(MODEL, RELEASE)
    versions_before = [info.version for info in ArtifactStore(root).versions(MODEL)]
    code, err = refused_run(root, capsys, "--set", f"train.init_from={tmp_path / 'w.npz'}")
    assert code == 2
    assert "1 missing key(s): classifier.bias" in err
    assert "1 mis-shaped key(s): features.0.bias (model [32], given [31])" in err
    assert "train.init_strict: false" in err
    # The digits fix the network's shapes, so this is found before the version exists: nothing is stored.
    store = ArtifactStore(root)
    assert [info.version for info in store.versions(MODEL)] == versions_before
    assert store.alias(MODEL, RELEASE) == released_before


def test_a_trusted_pickle_with_a_new_head_fine_tunes_and_records_its_sha256(fine_tuned, tmp_path, capsys):
    root, first, _ = fine_tuned
    _, arrays = release_weights(ArtifactStore(root), first)
    state = {name: array for name, array in arrays.items() if not name.startswith("classifier.")}
    paddle.save(state, str(tmp_path / "backbone.pdparams"))
    code = main(["run", "--store", str(root), *TINY_RUN, "--set", f"train.init_from={tmp_path / 'backbone.pdparams'}",
                 "--set", "train.init_allow_pickle=true", "--set", "train.init_strict=false"])
    assert code in (0, 1), capsys.readouterr().err  # the gate may judge it either way; the start is tested
    store = ArtifactStore(root)
    version = store.versions(MODEL)[-1].version
    init = store.read_manifest(train_stage(store, version))["metrics"][INIT_FROM]
    assert init["source"] == "file" and init["path"] == str(tmp_path / "backbone.pdparams")
    assert init["sha256"] == hashlib.sha256((tmp_path / "backbone.pdparams").read_bytes()).hexdigest()
    assert init["strict"] is False and init["fresh_keys"] == ["classifier.bias", "classifier.weight"]
    assert init["loaded_keys"] == len(state)
