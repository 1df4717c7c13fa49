"""fsck finds every kind of problem, tells live writers from crashed ones, and repairs orphans only."""

import os
from pathlib import Path

import pytest

from quantgate.artifacts.fsck import check_store, repair
from quantgate.artifacts.manifest import sealed_json


@pytest.fixture
def finished(store, commit_stage):
    """v1 with two stages, finalized as passed and released."""
    version = store.create_version("m")
    data = commit_stage(version, "data", {"splits.npz": b"0123456789" * 10})
    commit_stage(version, "train", {"weights.npz": b"w" * 64, "sub/steps.csv": b"1,2\n"}, inputs={"data": data})
    store.finalize_version(version, {"status": "passed"})
    store.set_alias("m", "release", "v1")
    return version


def kinds(store) -> list[tuple[str, str]]:
    return [(problem.kind, problem.path) for problem in check_store(store)]


def flip(path: Path, offset: int = 5) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_clean_store_has_no_problems(store, finished):
    assert check_store(store) == []


def test_a_cache_kinds_state_database_is_bookkeeping_not_a_stray(store, finished):
    import sqlite3

    state = store.cache("file-hashes").state_file()
    with sqlite3.connect(state) as db:
        db.execute("CREATE TABLE t (x)")
    assert check_store(store) == []
    (state.parent / "stray.txt").write_text("not a cache entry")  # anything else there still is reported
    assert kinds(store) == [("unexpected-entry", ".cache/file-hashes/stray.txt")]


@pytest.mark.parametrize(("relpath", "kind"), [
    ("train/weights.npz", "hash-mismatch"),
    ("train/sub/steps.csv", "hash-mismatch"),
    ("train/manifest.json", "malformed-manifest"),
])
def test_a_flipped_byte_in_a_stage_is_named(store, finished, relpath, kind):
    flip(Path(finished.path) / relpath, offset=2)
    problems = check_store(store)
    assert (kind, "m/versions/v1/train") in [(p.kind, p.path) for p in problems]
    message = next(p.message for p in problems if p.kind == kind)
    assert "v1" in message and (relpath.split("/")[-1] in message)


def test_flipped_version_record_and_alias_file_are_named(store, finished):
    flip(Path(finished.path) / "version.json", offset=40)
    flip(store.root / "m" / "aliases" / "release.json", offset=40)
    found = kinds(store)
    assert ("malformed-record", "m/versions/v1/version.json") in found
    assert ("malformed-alias", "m/aliases/release.json") in found


def test_missing_and_extra_files_are_reported(store, finished):
    (Path(finished.path) / "data" / "splits.npz").unlink()
    (Path(finished.path) / "train" / "smuggled.pkl").write_bytes(b"x")
    assert kinds(store) == [("missing-file", "m/versions/v1/data"), ("extra-file", "m/versions/v1/train")]


def test_dangling_and_failed_release_aliases_are_reported(store, finished, commit_stage):
    aliases = store.root / "m" / "aliases"
    (aliases / "staging.json").write_bytes(sealed_json({"alias": "staging", "model": "m", "version": "v9"}))
    failed = store.create_version("m")
    store.finalize_version(failed, {"status": "failed"})
    (aliases / "release.json").chmod(0o644)
    (aliases / "release.json").write_bytes(sealed_json({"alias": "release", "model": "m", "version": "v2"}))
    found = {problem.kind: problem.message for problem in check_store(store)}
    assert "points at v9, which does not exist" in found["dangling-alias"]
    assert "v2, whose status is 'failed'" in found["release-not-passed"]


def test_orphans_are_repairable_and_repair_removes_only_them(store, finished):
    version_dir = Path(store.create_version("m").path)
    (version_dir / ".staging-train-0123abcd").mkdir()
    (version_dir / ".staging-train-0123abcd" / "weights.npz").write_bytes(b"half")
    (store.root / "m" / "aliases" / ".release.json.x1y2.tmp").write_bytes(b"{")
    (version_dir / "notes.txt").write_text("mine")  # user data: reported, never removed
    problems = check_store(store)
    assert sorted((p.kind, p.repairable) for p in problems) == [
        ("incomplete-version", False), ("orphan-staging", True), ("orphan-temp", True), ("unexpected-entry", False)]
    assert next(p for p in problems if p.kind == "incomplete-version").severity == "warning"
    removed = repair(store, problems)
    assert sorted(removed) == ["m/aliases/.release.json.x1y2.tmp", "m/versions/v2/.staging-train-0123abcd"]
    assert (version_dir / "notes.txt").read_text() == "mine"
    assert [p.kind for p in check_store(store)] == ["unexpected-entry", "incomplete-version"]


def test_live_writers_are_neither_reported_nor_removed(store):
    version = store.create_version("m")
    with store.write_stage(version, "train", config={}, inputs={}) as writer:
        (writer.dir / "w.bin").write_bytes(b"w")
        problems = check_store(store)
        assert [p.kind for p in problems] == ["incomplete-version"]  # the staging folder is held: not an orphan
        assert repair(store, problems) == [] and writer.dir.is_dir()
    with store.hold_version(version):
        assert check_store(store) == []  # held: the run is "running", not "interrupted"


def test_a_version_nobody_holds_and_without_record_is_reported_as_interrupted(store):
    store.create_version("m")
    (problem,) = check_store(store)
    assert (problem.kind, problem.severity, problem.path) == ("incomplete-version", "warning", "m/versions/v1")


def test_decisions_and_the_audit_log_are_checked_too(store, finished):
    store.record_decision(finished, {"gate": {"passed": True, "criteria": []}})  # the shape `quantgate gate` writes
    assert check_store(store) == []
    flip(Path(finished.path) / "decisions" / "0001.json", offset=20)
    with open(store.root / "m" / "audit.jsonl", "ab") as log:
        log.write(b"{not json\n")
    assert kinds(store) == [("malformed-decision", "m/versions/v1/decisions/0001.json"),
                            ("malformed-audit-log", "m/audit.jsonl")]
