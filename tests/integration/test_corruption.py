"""One flipped byte anywhere in a real pipeline's store is caught, named, and never loaded or reused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runs import MODEL, TINY_RUN, copy_store, versions_dir

from quantgate.artifacts import ArtifactCorrupt, ArtifactStore
from quantgate.artifacts.fsck import check_store


def flip_one_byte(path: Path) -> None:
    os.chmod(path, 0o644)  # committed files are read-only; the test plays a failing disk or a careless edit
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("relpath", "fsck_kind"), [
    ("versions/v1/train/weights.npz", "hash-mismatch"),
    ("versions/v1/export/model.pdiparams", "hash-mismatch"),
    ("versions/v1/convert/int8.onnx", "hash-mismatch"),
    ("versions/v1/quantize/manifest.json", "malformed-manifest"),
    ("versions/v1/version.json", "malformed-record"),
    ("aliases/release.json", "malformed-alias"),
])
def test_a_flipped_byte_is_named_by_fsck_and_refused_before_use(quantgate_cli, released_store, tmp_path,
                                                                 relpath, fsck_kind):
    store = copy_store(released_store.root, tmp_path / "store")
    flip_one_byte(store / MODEL / relpath)
    shown = f"{MODEL}/{relpath}"

    found = [problem.describe() for problem in check_store(ArtifactStore(store))]  # what `quantgate fsck` prints
    line = next(line for line in found if fsck_kind in line)
    assert line.startswith("error") and shown in line and ("v1" in line or "release" in line)

    if relpath.endswith("version.json"):  # listings still work and say which version is damaged
        listing = json.loads(quantgate_cli.run("versions", "--store", str(store), "--json").stdout)
        assert [entry["status"] for entry in listing] == ["corrupt"]

    # Using the version (what `promote` does) checks every byte first; nothing is loaded before that.
    api = ArtifactStore(store)
    with pytest.raises(ArtifactCorrupt, match=shown.replace(".", r"\.")):
        if relpath.startswith("aliases"):
            api.alias(MODEL, "release")
        else:
            api.set_alias(MODEL, "release", "v1", reason="re-promote")


def test_a_corrupted_earlier_stage_is_never_reused_and_fails_the_release_comparison(quantgate_cli, released_store, tmp_path):
    store = copy_store(released_store.root, tmp_path / "store")
    flip_one_byte(versions_dir(store) / "v1" / "export" / "model.pdiparams")
    rerun = quantgate_cli.run("run", "--store", str(store), *TINY_RUN)
    assert "train: reused from v1" in rerun.stderr  # intact stages still are
    assert "export: computed" in rerun.stderr
    # v1 is the current release, and the gate fails closed on a release it cannot verify.
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    # The duel's inputs (v1's convert, made from the damaged export) no longer verify: nothing of v1 is trusted.
    assert "release v1 cannot be compared with: digits-cnn/versions/v1/export/model.pdiparams" in rerun.stderr
    export = json.loads((versions_dir(store) / "v2" / "export" / "manifest.json").read_text())
    assert export["reused_from"] is None
    # The damage stays visible: committed data is never rewritten, only reported.
    assert quantgate_cli.run("fsck", "--store", str(store)).returncode == 1
