"""What a power cut must not undo: every new name the store makes is flushed (fsync of its parent
folder), the cache's manifest is fsynced, and version numbers are never handed out twice.

A power cut cannot be staged in a test; instead os.fsync is wrapped (the OS call, not the store)
to record which files and folders were flushed, and the test checks each that must be.
"""

import os
import shutil
import stat
from pathlib import Path

import pytest


@pytest.fixture
def fsynced(monkeypatch):
    """The paths os.fsync is called on, in order: ("dir" | "file", path)."""
    calls: list[tuple[str, Path]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        calls.append((kind, Path(os.readlink(f"/proc/self/fd/{fd}"))))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return calls


def test_a_new_version_folder_is_flushed_into_its_parent(tmp_path, fsynced):
    from quantgate.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path / "store")
    fsynced.clear()
    version = store.create_version("m")
    dirs = [path for kind, path in fsynced if kind == "dir"]
    print(dirs)
    assert Path(version.path).parent in dirs  # versions/, after mkdir of v1
    assert store.root / "m" in dirs and store.root in dirs  # the new versions/ and model folders too


def test_aliases_decisions_and_the_audit_log_are_flushed_into_their_parents(store, commit_stage, fsynced):
    version = store.create_version("m")
    commit_stage(version, "data", {"a.bin": b"a"})
    store.finalize_version(version, {"status": "passed"})
    fsynced.clear()
    store.set_alias("m", "release", "v1")
    dirs = [path for kind, path in fsynced if kind == "dir"]
    files = [path for kind, path in fsynced if kind == "file"]
    print(fsynced)
    assert store.root / "m" / "aliases" in dirs  # release.json renamed into aliases/
    assert store.root / "m" in dirs  # aliases/ and audit.jsonl created in the model folder
    assert store.root / "m" / "audit.jsonl" in files
    fsynced.clear()
    store.record_decision(version, {"gate": {"passed": True, "criteria": []}})
    dirs = [path for kind, path in fsynced if kind == "dir"]
    assert Path(version.path) / "decisions" in dirs and Path(version.path) in dirs


def test_a_cache_entry_is_flushed_manifest_and_all(tmp_path, fsynced):
    from quantgate.artifacts.cache import ENTRY_MANIFEST, ContentCache

    cache = ContentCache(tmp_path, "kind")
    with cache.fill("d1") as folder:
        (folder / "model.bin").write_bytes(b"weights")
        staging = folder
    files = [path.name for kind, path in fsynced if kind == "file"]
    dirs = [path for kind, path in fsynced if kind == "dir"]
    print(fsynced)
    assert ENTRY_MANIFEST in files and "model.bin" in files
    assert tmp_path / ".cache" / "kind" in dirs[-1:]  # the rename into place, flushed last
    assert not staging.exists()


def test_version_numbers_are_never_reused_after_the_newest_folder_is_deleted(store):
    store.create_version("m")
    second = store.create_version("m")
    shutil.rmtree(second.path)  # deleted by hand
    third = store.create_version("m")
    print(second.version, "deleted; next:", third.version)
    assert third.version == "v3"
    assert [info.version for info in store.versions("m")] == ["v1", "v3"]
