"""fsck against a store forged by hand: links, FIFOs, a repair racing a live writer, cache orphans,
a torn audit line, a re-decided release, a missing store.

fsck runs in a child process (`python -m quantgate.cli fsck`) wherever the old behaviour was a
crash or a hang, so a hang fails the test by its timeout instead of stalling the suite.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from quantgate.artifacts.fsck import check_store, repair


def fsck(root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return quantgate("fsck", "--store", str(root), *args, timeout=timeout)


def quantgate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quantgate.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def finished(store, commit_stage, status: str = "passed"):
    version = store.create_version("m")
    commit_stage(version, "data", {"splits.npz": b"0123456789"})
    store.finalize_version(version, {"status": status})
    return version


def test_a_symlink_named_like_a_staging_folder_is_named_and_left_alone(store, commit_stage, tmp_path):
    version = finished(store, commit_stage)
    target = tmp_path / "elsewhere"
    (target / "keep").mkdir(parents=True)
    (target / "keep" / "data.bin").write_bytes(b"precious")
    (Path(version.path) / ".staging-train-0123abcd").symlink_to(target, target_is_directory=True)
    result = fsck(store.root, "--repair")
    print(result.returncode, result.stdout[-600:], result.stderr[-600:])
    assert result.returncode == 1, result.stderr
    assert "special-file" in result.stdout and "m/versions/v1/.staging-train-0123abcd: a symlink" in result.stdout
    assert (target / "keep" / "data.bin").read_bytes() == b"precious"


def test_a_fifo_named_like_a_temporary_file_is_named_without_hanging(store, commit_stage):
    finished(store, commit_stage)
    store.set_alias("m", "latest", "v1")
    os.mkfifo(store.root / "m" / "aliases" / ".x.tmp")
    os.mkfifo(store.root / "m" / "versions" / "v1" / "data" / "planted.npz")
    result = fsck(store.root, "--repair", timeout=30)  # the old fsck opened the FIFO and waited forever
    print(result.returncode, result.stdout[-600:])
    assert result.returncode == 1
    assert "m/aliases/.x.tmp: a FIFO" in result.stdout
    assert "extra-file" in result.stdout and "planted.npz" in result.stdout
    assert os.path.exists(store.root / "m" / "aliases" / ".x.tmp")  # not the store's: left for the user


def test_repair_never_reaches_through_a_symlinked_folder(store, commit_stage, tmp_path):
    finished(store, commit_stage)
    outside = tmp_path / "outside"
    (outside / ".staging-train-0123abcd").mkdir(parents=True)
    (outside / ".staging-train-0123abcd" / "weights.bin").write_bytes(b"not the store's")
    (outside / ".release.json.ab12.tmp").write_bytes(b"not the store's")
    (store.root / "m" / "versions" / "v2").symlink_to(outside, target_is_directory=True)
    (store.root / "m2").mkdir()
    (store.root / "m2" / "aliases").symlink_to(outside, target_is_directory=True)
    (store.root / "m3").symlink_to(outside, target_is_directory=True)
    problems = check_store(store)
    repair(store, problems)
    print(sorted((p.kind, p.path) for p in problems))
    assert (outside / ".staging-train-0123abcd" / "weights.bin").read_bytes() == b"not the store's"
    assert (outside / ".release.json.ab12.tmp").exists()
    assert {("special-file", "m/versions/v2"), ("special-file", "m2/aliases"), ("special-file", "m3")} <= {
        (p.kind, p.path) for p in problems}


# The child creates a staging folder and stops right after the mkdir that makes it visible (a hook on
# Path.mkdir, the OS call, not on the store) until the parent's repair has run; then it commits.
_WRITER_AT_BARRIER = """
import pathlib, sys, time
from quantgate.artifacts import ArtifactStore
root, rendezvous = sys.argv[1], pathlib.Path(sys.argv[2])
real_mkdir = pathlib.Path.mkdir
def mkdir(self, *args, **kwargs):
    real_mkdir(self, *args, **kwargs)
    if self.name.startswith(".staging-"):
        (rendezvous / "created").write_text(self.name)
        while not (rendezvous / "go").exists():
            time.sleep(0.01)
pathlib.Path.mkdir = mkdir
store = ArtifactStore(root)
version = store.create_version("m")
with store.hold_version(version):
    with store.write_stage(version, "train", config={}, inputs={}) as writer:
        (writer.dir / "w.bin").write_bytes(b"w")
    store.finalize_version(version, {"status": "passed"})
print("committed", flush=True)
"""


def test_a_concurrent_repair_never_removes_a_live_writers_staging_folder(store, tmp_path):
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    child = subprocess.Popen([sys.executable, "-c", _WRITER_AT_BARRIER, str(store.root), str(rendezvous)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (rendezvous / "created").exists():
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.poll() else ""
            time.sleep(0.01)
        problems = check_store(store)
        removed = repair(store, problems)
        print("problems:", [(p.kind, p.path) for p in problems], "removed:", removed)
    finally:
        (rendezvous / "go").write_text("")
        out, err = child.communicate(timeout=60)
    print(out, err[-800:])
    assert removed == [] and child.returncode == 0 and "committed" in out
    assert check_store(store) == [] and store.verify_version("m", "v1")["status"] == "passed"


def test_cache_orphans_are_reported_and_repaired(store):
    kind = store.root / ".cache" / "quantize-search"
    with store.cache("quantize-search").fill("d1") as folder:
        (folder / "model.bin").write_bytes(b"weights")
    (kind / ".staging-d2-0123abcd").mkdir()  # a fill killed midway
    (kind / ".staging-d2-0123abcd" / "half.bin").write_bytes(b"h")
    (kind / ".damaged-d3-89abcdef").mkdir()  # an entry a reader set aside
    problems = check_store(store)
    print([(p.kind, p.path) for p in problems])
    assert sorted((p.kind, p.path, p.repairable) for p in problems) == [
        ("orphan-cache", ".cache/quantize-search/.damaged-d3-89abcdef", True),
        ("orphan-staging", ".cache/quantize-search/.staging-d2-0123abcd", True)]
    repair(store, problems)
    assert check_store(store) == [] and sorted(p.name for p in kind.iterdir()) == ["d1"]
    (kind / "d1" / "model.bin").write_bytes(b"tampered")
    assert [p.kind for p in check_store(store)] == ["corrupt-cache-entry"]


def test_a_torn_audit_line_is_named_and_cut_by_repair(store, commit_stage):
    finished(store, commit_stage)
    store.set_alias("m", "release", "v1")
    with open(store.root / "m" / "audit.jsonl", "ab") as log:
        log.write(b'{"alias": "release", "from": "v1", "to": "v')  # a full disk cut this line
    before = fsck(store.root)
    print(before.returncode, before.stdout[-600:])
    assert before.returncode == 1 and "torn-audit-line" in before.stdout and "m/audit.jsonl" in before.stdout
    repaired = fsck(store.root, "--repair")
    print(repaired.returncode, repaired.stdout[-600:])
    assert repaired.returncode == 0, repaired.stdout
    assert fsck(store.root).returncode == 0
    log = quantgate("log", "--store", str(store.root), "--model", "m")
    assert log.returncode == 0 and "release" in log.stdout


def test_a_release_re_decided_as_passed_after_a_failed_run_is_clean(store, commit_stage):
    version = finished(store, commit_stage, status="failed")
    store.record_decision(version, {"gate": {"passed": True, "criteria": []}})  # `quantgate gate v1` passed
    store.set_alias("m", "release", "v1")  # `quantgate promote v1`
    problems = check_store(store)
    print([(p.kind, p.message) for p in problems])
    assert problems == []
    assert fsck(store.root).returncode == 0
    store.record_decision(version, {"gate": {"passed": False, "criteria": [{"name": "accuracy", "passed": False}]}})
    (problem,) = check_store(store)
    assert problem.kind == "release-not-passed" and "failed accuracy" in problem.message


def test_fsck_on_a_missing_store_is_bad_input(tmp_path):
    result = fsck(tmp_path / "no-such-store")
    print(result.returncode, result.stderr[-300:])
    assert result.returncode == 2 and "no-such-store" in result.stderr
    assert not (tmp_path / "no-such-store").exists()
