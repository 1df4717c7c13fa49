"""verify_stage: every byte of a committed stage is checked before anyone reads it."""

import os
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactNotFound, StageRef


@pytest.fixture
def committed(store, commit_stage) -> StageRef:
    version = store.create_version("m")
    return commit_stage(version, "train", {"model.pdparams": b"\x00" * 64, "meta/info.txt": b"hello"})


def _writable(path: Path) -> Path:
    # Committed files are read-only on purpose; the tests play the part of a careless user.
    os.chmod(path, 0o644)
    return path


def test_intact_stage_verifies(store, committed):
    assert store.verify_stage(committed) == Path(committed.path)
    assert store.read_manifest(committed)["stage"] == "train"


def test_committed_files_are_read_only(committed):
    assert not os.stat(Path(committed.path) / "model.pdparams").st_mode & 0o222


def test_one_flipped_byte_is_detected(store, committed):
    path = _writable(Path(committed.path) / "model.pdparams")
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactCorrupt) as caught:
        store.verify_stage(committed)
    message = str(caught.value)
    assert "m/versions/v1/train/model.pdparams" in message
    assert "v1" in message and "expected sha256" in message and "got sha256" in message


def test_extra_file_is_detected(store, committed):
    (Path(committed.path) / "meta" / "smuggled.pkl").write_bytes(b"evil")
    with pytest.raises(ArtifactCorrupt, match=r"m/versions/v1/train/meta/smuggled\.pkl.*not listed"):
        store.verify_stage(committed)


def test_missing_file_is_detected(store, committed):
    (Path(committed.path) / "meta" / "info.txt").unlink()
    with pytest.raises(ArtifactCorrupt, match=r"m/versions/v1/train/meta/info\.txt.*missing"):
        store.verify_stage(committed)


def test_symlink_in_place_of_a_file_is_detected(store, committed, tmp_path):
    path = Path(committed.path) / "meta" / "info.txt"
    copy = tmp_path / "info-copy.txt"
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)
    with pytest.raises(ArtifactCorrupt, match="got a symlink"):
        store.verify_stage(committed)


def test_edited_manifest_is_detected(store, committed):
    manifest = _writable(Path(committed.path) / "manifest.json")
    manifest.write_text(manifest.read_text().replace('"train"', '"trian"', 1))
    with pytest.raises(ArtifactCorrupt, match=r"m/versions/v1/train/manifest\.json of model 'm' v1 changed"):
        store.read_manifest(committed)


def test_deleted_stage_is_not_found(store, committed):
    for path in sorted(Path(committed.path).rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    Path(committed.path).rmdir()
    with pytest.raises(ArtifactNotFound, match="has no manifest"):
        store.verify_stage(committed)


def test_input_whose_manifest_changed_is_refused(store, committed):
    manifest = _writable(Path(committed.path) / "manifest.json")
    manifest.write_bytes(manifest.read_bytes() + b"\n")
    version = store.create_version("m")
    with pytest.raises(ArtifactCorrupt):
        store.write_stage(version, "quantize", config={}, inputs={"model": committed})
