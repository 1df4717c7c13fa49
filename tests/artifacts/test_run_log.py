"""The per-version run log: appended, never hashed, accepted by fsck, and never written through a link."""

import os
from pathlib import Path

import pytest

from quantgate.artifacts import RUN_LOG_FILE, ArtifactError, ArtifactNotFound, InvalidName, VersionRef
from quantgate.artifacts.fsck import check_store


def test_appends_land_in_order_in_the_version_folder(store):
    version = store.create_version("m")
    store.append_run_log(version, "paddle: loading\n")
    store.append_run_log(version, "onnxruntime: caf\u00e9 \udcff ok\n")  # a lone surrogate must not fail the run
    path = store.run_log_path(version)
    assert path == Path(version.path) / RUN_LOG_FILE == store.root / "m" / "versions" / "v1" / "run.log"
    assert path.read_text(encoding="utf-8") == "paddle: loading\nonnxruntime: caf\u00e9 \\udcff ok\n"


def test_a_finished_version_with_a_run_log_is_fsck_clean_and_the_log_is_not_hashed(store, commit_stage):
    version = store.create_version("m")
    commit_stage(version, "train", {"weights.npz": b"w" * 8})
    store.append_run_log(version, "during the run\n")
    store.finalize_version(version, {"status": "passed"})
    store.append_run_log(version, "after the record was written\n")
    assert store.version_record(version)["stages"].keys() == {"train"}
    assert store.versions("m")[0].stages == ("train",)
    store.verify_version("m", "v1")
    assert check_store(store) == []


def test_a_version_that_does_not_exist_takes_no_log(store):
    store.create_version("m")
    with pytest.raises(ArtifactNotFound, match=r"run log of model 'm' v2 .*does not exist"):
        store.append_run_log(VersionRef("m", "v2", "/nowhere"), "lost\n")
    assert not (store.root / "m" / "versions" / "v2").exists()


def test_a_symlinked_run_log_is_an_fsck_error_and_is_never_written_through(store, tmp_path):
    version = store.create_version("m")
    store.finalize_version(version, {"status": "passed"})
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    os.symlink(outside, store.run_log_path(version))
    (problem,) = check_store(store)
    assert (problem.kind, problem.path, problem.severity, problem.repairable) == (
        "bad-run-log", "m/versions/v1/run.log", "error", False)
    assert "symlink" in problem.message
    with pytest.raises(ArtifactError, match="not a regular file"):
        store.append_run_log(version, "redirected\n")
    assert outside.read_text() == "mine"


def test_a_pipe_at_the_log_name_is_refused_without_hanging(store):
    version = store.create_version("m")
    os.mkfifo(store.run_log_path(version))
    with pytest.raises(ArtifactError, match="not a regular file"):
        store.append_run_log(version, "nobody reads this\n")


def test_stage_dir_names_where_a_stage_is_committed_without_touching_the_disk(store, commit_stage):
    version = store.create_version("m")
    planned = store.stage_dir(version, "train")
    assert planned == Path(version.path) / "train" and not planned.exists()
    assert Path(commit_stage(version, "train", {"w.bin": b"w"}).path) == planned
    for bad in ("../x", RUN_LOG_FILE, "version.json"):
        with pytest.raises(InvalidName):
            store.stage_dir(version, bad)
