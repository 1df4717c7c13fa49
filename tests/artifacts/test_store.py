"""Versions, stage commits, version records and aliases on a real filesystem."""

import hashlib
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantgate.artifacts import (
    ArtifactError,
    ArtifactExists,
    ArtifactNotFound,
    ArtifactStore,
    StoreNotWritable,
    VersionRef,
)


def test_versions_are_numbered_in_order(store):
    assert [store.create_version("mnist-cnn").version for _ in range(3)] == ["v1", "v2", "v3"]
    assert store.models() == ["mnist-cnn"]
    assert [info.version for info in store.versions("mnist-cnn")] == ["v1", "v2", "v3"]
    assert all(info.status == "incomplete" for info in store.versions())


def test_versions_sort_by_number_not_text(store):
    for _ in range(10):
        store.create_version("m")
    assert [info.version for info in store.versions("m")][-2:] == ["v9", "v10"]


def test_version_ref_is_hashable_and_picklable(store):
    ref = store.create_version("m")
    assert pickle.loads(pickle.dumps(ref)) == ref
    assert {ref: 1}[store.version("m", "v1")] == 1
    assert Path(ref.path).is_absolute() and Path(ref.path).is_dir()


def test_unknown_version_lists_existing_ones(store):
    store.create_version("m")
    with pytest.raises(ArtifactNotFound, match=r"v7.*existing versions: v1"):
        store.version("m", "v7")


_CREATE_VERSIONS = """
import sys, time
from quantgate.artifacts import ArtifactStore
root, start_at = sys.argv[1], float(sys.argv[2])
store = ArtifactStore(root)
time.sleep(max(0.0, start_at - time.time()))  # line the processes up so they really race
print(" ".join(store.create_version("m").version for _ in range(5)))
"""


def test_concurrent_processes_get_distinct_versions(tmp_path):
    root = tmp_path / "store"
    start_at = str(time.time() + 2.0)
    processes = [
        subprocess.Popen([sys.executable, "-c", _CREATE_VERSIONS, str(root), start_at],
                         stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [process.communicate(timeout=60)[0] for process in processes]
    assert all(process.returncode == 0 for process in processes)
    allocated = [version for output in outputs for version in output.split()]
    assert len(allocated) == 20
    assert sorted(allocated, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(1, 21)]


def test_staging_folder_is_invisible_until_commit(store):
    version = store.create_version("m")
    with store.write_stage(version, "train", config={"epochs": 1}, inputs={}) as writer:
        (writer.dir / "model.bin").write_bytes(b"weights")
        assert writer.dir.parent == Path(version.path)
        assert writer.dir.name.startswith(".staging-train-")
        assert store.versions("m")[0].stages == ()
        with pytest.raises(ArtifactNotFound, match="no committed stage 'train'"):
            store.stage_ref(version, "train")
        with pytest.raises(ArtifactError, match="not committed yet"):
            writer.ref
    assert store.versions("m")[0].stages == ("train",)
    assert store.stage_ref(version, "train") == writer.ref
    assert not writer.dir.exists()
    assert sorted(p.name for p in Path(version.path).iterdir()) == ["train"]


def test_exception_in_block_removes_staging_and_propagates(store):
    version = store.create_version("m")

    class StageFailed(Exception):
        pass

    with pytest.raises(StageFailed, match="boom"):
        with store.write_stage(version, "train", config={}, inputs={}) as writer:
            (writer.dir / "half-written.bin").write_bytes(b"x")
            raise StageFailed("boom")
    assert list(Path(version.path).iterdir()) == []
    with pytest.raises(ArtifactNotFound):
        store.stage_ref(version, "train")


def test_manifest_records_hashes_inputs_and_libraries(store, commit_stage):
    version = store.create_version("m")
    data = commit_stage(version, "data", {"train.npz": b"abc", "split/test.npz": b"defg"})
    train = commit_stage(version, "train", {"model.pdparams": b"w"}, metrics={"loss": 0.5}, inputs={"data": data})

    manifest_path = Path(train.path) / "manifest.json"
    raw = manifest_path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == train.manifest_sha256
    manifest = json.loads(raw)
    assert raw == (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
    assert manifest["schema"] == 1
    assert (manifest["model"], manifest["version"], manifest["stage"]) == ("m", "v1", "train")
    assert manifest["config"] == {"stage": "train"}
    assert manifest["metrics"] == {"loss": 0.5}
    assert manifest["inputs"] == {"data": {"model": "m", "version": "v1", "stage": "data",
                                           "manifest_sha256": data.manifest_sha256}}
    assert set(manifest["libraries"]) >= {"paddlepaddle", "onnxruntime", "numpy", "quantgate"}
    assert manifest["duration_s"] >= 0 and manifest["finished_at"] >= manifest["started_at"]

    data_files = store.read_manifest(data)["files"]
    assert data_files == {
        "train.npz": {"sha256": hashlib.sha256(b"abc").hexdigest(), "bytes": 3},
        "split/test.npz": {"sha256": hashlib.sha256(b"defg").hexdigest(), "bytes": 4},
    }


def test_nan_and_infinite_metrics_are_written_as_null(store, commit_stage):
    version = store.create_version("m")
    ref = commit_stage(version, "eval", {"r.txt": b"r"},
                       metrics={"accuracy": float("nan"), "latency_ms_p50": float("inf"), "ok": 1.0})
    text = (Path(ref.path) / "manifest.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["metrics"] == {"accuracy": None, "latency_ms_p50": None, "ok": 1.0}


def test_unserialisable_metric_fails_and_leaves_no_stage(store):
    version = store.create_version("m")
    with pytest.raises(ArtifactError, match=r"metrics\['model'\] is a object"):
        with store.write_stage(version, "train", config={}, inputs={}) as writer:
            writer.metrics["model"] = object()
    assert list(Path(version.path).iterdir()) == []


def test_committed_stage_cannot_be_rewritten(store, commit_stage):
    version = store.create_version("m")
    first = commit_stage(version, "train", {"model.bin": b"first"})
    with pytest.raises(ArtifactExists, match="already committed"):
        commit_stage(version, "train", {"model.bin": b"second"})
    assert (Path(first.path) / "model.bin").read_bytes() == b"first"
    assert store.verify_stage(first) == Path(first.path)
    assert sorted(p.name for p in Path(version.path).iterdir()) == ["train"]


def test_racing_writers_of_one_stage_commit_only_once(store):
    version = store.create_version("m")
    first = store.write_stage(version, "train", config={}, inputs={})
    second = store.write_stage(version, "train", config={}, inputs={})
    with first as writer:
        (writer.dir / "a").write_bytes(b"a")
    with pytest.raises(ArtifactExists):
        with second as writer:
            (writer.dir / "b").write_bytes(b"b")
    assert sorted(p.name for p in Path(version.path).iterdir()) == ["train"]
    assert store.read_manifest(first.ref)["files"].keys() == {"a"}


def test_finalize_writes_record_once(store, commit_stage):
    version = store.create_version("m")
    train = commit_stage(version, "train", {"model.bin": b"w"})
    store.finalize_version(version, {"status": "released", "gate": {"passed": True}})
    record = json.loads((Path(version.path) / "version.json").read_text())
    assert record["status"] == "released"
    assert (record["model"], record["version"]) == ("m", "v1")
    assert record["stages"] == {"train": train.manifest_sha256}
    assert "finalized_at" in record
    assert store.versions("m")[0].status == "released"
    assert store.versions("m")[0].record == record

    with pytest.raises(ArtifactExists, match="already finalized"):
        store.finalize_version(version, {"status": "rejected"})
    assert json.loads((Path(version.path) / "version.json").read_text()) == record
    with pytest.raises(ArtifactExists, match="finalized"):
        commit_stage(version, "late", {"x": b"x"})
    assert [p.name for p in Path(version.path).iterdir() if p.name.startswith(".")] == []


def test_finalize_requires_status(store):
    version = store.create_version("m")
    with pytest.raises(ArtifactError, match="'status'"):
        store.finalize_version(version, {"gate": "passed"})
    assert not (Path(version.path) / "version.json").exists()


def test_set_alias_refuses_unknown_and_unfinalized_versions(store):
    v1, v2 = store.create_version("m"), store.create_version("m")
    store.finalize_version(v1, {"status": "released"})
    store.set_alias("m", "release", "v1", reason="first release")
    with pytest.raises(ArtifactNotFound, match="v9"):
        store.set_alias("m", "release", "v9")
    with pytest.raises(ArtifactError, match=r"v2: that version is not finalized.*\(v1\)"):
        store.set_alias("m", "release", v2.version)
    assert store.alias("m", "release") == "v1"


def test_alias_is_replaced_atomically(store):
    for _ in range(2):
        store.finalize_version(store.create_version("m"), {"status": "released"})
    assert store.alias("m", "latest") is None
    store.set_alias("m", "latest", "v1")
    store.set_alias("m", "latest", "v2", reason="gate passed")
    assert store.alias("m", "latest") == "v2"
    aliases_dir = store.root / "m" / "aliases"
    assert sorted(p.name for p in aliases_dir.iterdir()) == [".lock", "latest.json"]  # lock file serialises moves
    record = json.loads((aliases_dir / "latest.json").read_text())
    assert record["model"] == "m" and record["alias"] == "latest" and record["version"] == "v2"
    assert record["previous_version"] == "v1" and record["reason"] == "gate passed"
    assert "updated_at" in record
    assert [(i.version, i.aliases) for i in store.versions("m")] == [("v1", ()), ("v2", ("latest",))]


def test_store_root_under_a_regular_file_is_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreNotWritable) as caught:
        ArtifactStore(blocker / "store")
    message = str(caught.value)
    assert str(blocker / "store") in message
    assert "--store DIR" in message and "QUANTGATE_STORE" in message
    assert caught.value.exit_code == 2


def test_store_creates_missing_root_and_resolves_it(tmp_path):
    store = ArtifactStore(tmp_path / "a" / ".." / "a" / "b")
    assert store.root == (tmp_path / "a" / "b").resolve()
    assert store.root.is_dir() and list(store.root.iterdir()) == []


def test_refs_from_another_store_are_looked_up_by_name(tmp_path, store):
    store.create_version("m")
    with pytest.raises(ArtifactNotFound):
        ArtifactStore(tmp_path / "other").version("m", "v1")
    foreign = VersionRef("m", "v1", str(tmp_path / "elsewhere"))
    with store.write_stage(foreign, "data", config={}, inputs={}) as writer:
        (writer.dir / "x").write_bytes(b"x")
    assert Path(writer.ref.path).parent == store.root / "m" / "versions" / "v1"
