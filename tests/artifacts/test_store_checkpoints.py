"""Per-epoch checkpoints: committed whole or not at all, listed in order, re-hashed before use."""

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactExists, ArtifactNotFound
from quantgate.artifacts.checkpoints import read_checkpoint
from quantgate.artifacts.errors import StoreFull


def write(store, version, name, payload=b"state"):
    with store.write_checkpoint(version, "train", name) as writer:
        (writer.dir / "model.pdparams").write_bytes(payload)
    return writer.ref


def test_checkpoints_are_listed_oldest_first_and_verified(store):
    version = store.create_version("m")
    first, second = write(store, version, "epoch-0001"), write(store, version, "epoch-0002", b"later")
    assert [ref.name for ref in store.checkpoints(version, "train")] == ["epoch-0001", "epoch-0002"]
    assert store.latest_checkpoint(version, "train") == second
    folder = store.verify_checkpoint(first)
    assert (folder / "model.pdparams").read_bytes() == b"state"
    assert store.versions("m")[0].stages == ()  # checkpoints are not stages


def test_an_interrupted_checkpoint_leaves_nothing_visible(store):
    version = store.create_version("m")
    with pytest.raises(KeyboardInterrupt):
        with store.write_checkpoint(version, "train", "epoch-0001") as writer:
            (writer.dir / "model.pdparams").write_bytes(b"half")
            raise KeyboardInterrupt
    assert store.checkpoints(version, "train") == []
    with pytest.raises(ArtifactNotFound, match="has no committed train checkpoint"):
        store.latest_checkpoint(version, "train")


def test_checkpoints_are_immutable_and_end_with_the_version(store):
    version = store.create_version("m")
    write(store, version, "epoch-0001")
    with pytest.raises(ArtifactExists, match="already committed"):
        write(store, version, "epoch-0001")
    store.finalize_version(version, {"status": "error"})
    with pytest.raises(ArtifactExists, match="finalized"):
        write(store, version, "epoch-0002")


def test_a_changed_file_is_caught_before_loading(store):
    version = store.create_version("m")
    ref = write(store, version, "epoch-0001")
    path = store.verify_checkpoint(ref) / "model.pdparams"
    path.chmod(0o644)
    path.write_bytes(b"evil pickle")
    with pytest.raises(ArtifactCorrupt, match="model.pdparams .* does not match its manifest"):
        store.verify_checkpoint(ref)


def test_a_checkpoint_that_runs_out_of_space_is_store_full_and_leaves_nothing(store):
    version = store.create_version("m")
    with pytest.raises(StoreFull, match="ran out of space while writing checkpoint 'epoch-0001'"):
        with store.write_checkpoint(version, "train", "epoch-0001") as writer:
            (writer.dir / "model.pdparams").write_bytes(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert store.checkpoints(version, "train") == []
    assert not list((store.root / "m" / "versions" / version.version / "checkpoints" / "train").iterdir())


def test_epoch_10000_is_newer_than_epoch_9999(store):
    version = store.create_version("m")
    write(store, version, "epoch-9999")
    newest = write(store, version, "epoch-10000", b"newest")
    assert [ref.name for ref in store.checkpoints(version, "train")] == ["epoch-9999", "epoch-10000"]
    assert store.latest_checkpoint(version, "train") == newest


def test_the_checkpoint_manifest_is_sealed_and_the_bytes_read_are_the_bytes_hashed(store):
    version = store.create_version("m")
    ref = write(store, version, "epoch-0001", b"weights")
    manifest = json.loads((Path(ref.path) / "manifest.json").read_bytes())
    assert manifest["record_sha256"] and manifest["checkpoint"] == "epoch-0001"
    assert read_checkpoint(ref) == {"model.pdparams": b"weights"}


def unsealed(text: str) -> str:
    record = {key: value for key, value in json.loads(text).items() if key != "record_sha256"}
    return json.dumps(record, sort_keys=True, indent=2) + "\n"


def rewrite_manifest(ref, data: bytes):
    path = Path(ref.path) / "manifest.json"
    path.chmod(0o644)
    path.write_bytes(data)


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[:-20], r"manifest.json \(the manifest of checkpoint 'epoch-0001' .*\) is not valid JSON"),
    (lambda text: text.replace('"bytes": 5', '"bytes": 6'), "changed after it was written"),
    (unsealed, "carries no seal"),  # as an older quantgate wrote them, next to pickles
])
def test_a_malformed_or_unsealed_checkpoint_manifest_is_corrupt_and_names_fsck(store, damage, message):
    version = store.create_version("m")
    write(store, version, "epoch-0001")
    text = (Path(store.latest_checkpoint(version, "train").path) / "manifest.json").read_text()
    rewrite_manifest(store.latest_checkpoint(version, "train"), damage(text).encode())
    ref = store.latest_checkpoint(version, "train")  # listed after the damage: the pin is of the damaged bytes
    with pytest.raises(ArtifactCorrupt, match=message) as refused:
        read_checkpoint(ref)
    assert "quantgate fsck" in str(refused.value)


def test_a_checkpoint_copied_from_another_version_is_refused(store):
    source = write(store, store.create_version("m"), "epoch-0003")
    target = store.create_version("m")
    shutil.copytree(source.path, Path(target.path) / "checkpoints" / "train" / "epoch-0003")
    copied = store.latest_checkpoint(target, "train")
    with pytest.raises(ArtifactCorrupt, match="names another checkpoint .*'version': 'v1'"):
        read_checkpoint(copied)


def test_a_checkpoint_file_replaced_by_a_symlink_is_refused(store, tmp_path):
    version = store.create_version("m")
    ref = write(store, version, "epoch-0001")
    outside = tmp_path / "outside"
    outside.write_bytes(b"state")  # same bytes, same hash: only the link itself is wrong
    (Path(ref.path) / "model.pdparams").unlink()
    (Path(ref.path) / "model.pdparams").symlink_to(outside)
    with pytest.raises(ArtifactCorrupt, match="cannot be read as a regular file"):
        read_checkpoint(ref)


def test_a_checkpoint_file_replaced_by_a_fifo_is_refused_without_waiting(store):
    version = store.create_version("m")
    ref = write(store, version, "epoch-0001")
    fifo = Path(ref.path) / "model.pdparams"
    fifo.unlink()
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(pytest.raises(ArtifactCorrupt, read_checkpoint, ref)))
    reader.start()
    reader.join(5)
    if reader.is_alive():  # it blocked on the FIFO: give it a writer so the thread can end, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
        pytest.fail("reading the checkpoint waited on a FIFO")
    assert "cannot be read as a regular file" in str(outcome[0].value)


def test_a_checkpoint_of_an_older_quantgate_is_a_warning_for_fsck_and_never_loaded(store):
    from quantgate.artifacts.fsck import check_store

    version = store.create_version("m")
    write(store, version, "epoch-0001")
    ref = store.latest_checkpoint(version, "train")
    rewrite_manifest(ref, unsealed((Path(ref.path) / "manifest.json").read_text()).encode())
    found = [(problem.severity, problem.kind) for problem in check_store(store) if "checkpoints" in problem.path]
    assert found == [("warning", "legacy-checkpoint")]  # a store written before stays fsck-clean (exit 0)
    with pytest.raises(ArtifactCorrupt, match="carries no seal"):
        read_checkpoint(store.latest_checkpoint(version, "train"))
