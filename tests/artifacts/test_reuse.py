"""Reuse by input digest: content decides, damaged candidates are skipped, reused files are verified copies."""

import os
from pathlib import Path

from quantgate.artifacts import ArtifactStore


def build(store: ArtifactStore, commit_stage, data_bytes: bytes, config: dict):
    """One version: a data stage with `data_bytes`, and the digest a train stage on it would have."""
    version = store.create_version("m")
    data = commit_stage(version, "data", {"splits.npz": data_bytes})
    return version, data, store.input_digest("train", config, {"data": data}, {"code_sha256": "c0de"})


def test_digest_depends_on_input_content_and_config_not_on_version(store, commit_stage):
    _, _, first = build(store, commit_stage, b"same", {"epochs": 3})
    _, _, same = build(store, commit_stage, b"same", {"epochs": 3})
    _, _, other_data = build(store, commit_stage, b"different", {"epochs": 3})
    _, _, other_config = build(store, commit_stage, b"same", {"epochs": 4})
    assert first == same
    assert len({first, other_data, other_config}) == 3


def test_a_stage_is_reused_by_digest_with_its_files_and_metrics(store, commit_stage):
    v1, data1, digest = build(store, commit_stage, b"same", {"epochs": 3})
    with store.write_stage(v1, "train", {"epochs": 3}, {"data": data1}, input_digest=digest) as writer:
        (writer.dir / "weights.npz").write_bytes(b"trained")
        writer.metrics["loss"] = 0.25
    v2, data2, digest2 = build(store, commit_stage, b"same", {"epochs": 3})
    source = store.find_reusable("m", "train", digest2)
    assert source == writer.ref
    reused = store.reuse_stage(v2, "train", {"epochs": 3}, {"data": data2}, source, digest2)
    manifest = store.read_manifest(reused)
    assert manifest["reused_from"] == {"version": "v1", "manifest_sha256": writer.ref.manifest_sha256}
    assert manifest["metrics"] == {"loss": 0.25} and manifest["input_digest"] == digest2
    assert manifest["inputs"]["data"]["version"] == "v2"
    copy, original = Path(reused.path) / "weights.npz", Path(writer.ref.path) / "weights.npz"
    assert copy.read_bytes() == b"trained" and os.stat(copy).st_ino == os.stat(original).st_ino  # hard link


def test_a_damaged_candidate_is_skipped_for_an_older_intact_one(store, commit_stage):
    refs = []
    for _ in range(2):
        version, data, digest = build(store, commit_stage, b"same", {})
        with store.write_stage(version, "train", {}, {"data": data}, input_digest=digest) as writer:
            (writer.dir / "weights.npz").write_bytes(b"trained")
        refs.append(writer.ref)
    damaged = Path(refs[1].path) / "weights.npz"
    damaged.unlink()  # committed files are read-only: replace the file, as a careless tool would
    damaged.write_bytes(b"trainee")
    assert store.find_reusable("m", "train", digest) == refs[0]
    assert store.find_reusable("m", "train", "0" * 64) is None
