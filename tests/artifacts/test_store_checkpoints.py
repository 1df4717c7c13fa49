"""Per-epoch checkpoints: committed whole or not at all, listed in order, re-hashed before use."""

import errno

import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactExists, ArtifactNotFound
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
