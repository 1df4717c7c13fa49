"""Bad input, each refused with a message that names it, a non-zero exit, nothing half-written
(fsck stays clean) and `release` unmoved."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest
from cli_runs import MODEL, TINY_RUN, alias_bytes, copy_store, versions_dir

from quantgate.artifacts import ArtifactNotFound, ArtifactStore
from quantgate.artifacts.fsck import check_store
from quantgate.artifacts.manifest import sealed_json


@pytest.fixture(scope="module")
def store(released_store, tmp_path_factory) -> Path:
    return copy_store(released_store.root, tmp_path_factory.mktemp("bad-input") / "store")


@pytest.fixture
def nothing_lost(store):
    """After the test: fsck (what `quantgate fsck` runs) finds nothing, and no alias moved."""
    aliases = alias_bytes(store)
    yield
    assert check_store(ArtifactStore(store)) == []
    assert alias_bytes(store) == aliases
    assert ArtifactStore(store).alias(MODEL, "release") == "v1"


def new_versions(store: Path, before: set[str]) -> list[dict]:
    return [json.loads((versions_dir(store) / name / "version.json").read_text())
            for name in sorted(set(os.listdir(versions_dir(store))) - before)]


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("train: [epochs: 3\n", ["not valid YAML", "fix the syntax"]),
    ("train:\n  epoch: 3\nquantise:\n  algo: KL\n", ["train.epoch: unknown key", "quantise: unknown key",
                                                     "2 problem(s)"]),
    # An anchor bomb: seven lines, 200,000 strings once expanded; echoed whole it was 9 MB of error text.
    ("a: &a [xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx, xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx]\n"
     + "".join(f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcde", "bcdef"))
     + "train: {epochs: *f}\n", ["expands to more than 10000 values", "no anchors"]),
])
def test_bad_config_files_are_refused_before_anything_runs(quantgate_cli, store, nothing_lost, tmp_path,
                                                           yaml_text, expected):
    before = set(os.listdir(versions_dir(store)))
    config = tmp_path / "release.yaml"
    config.write_text(yaml_text)
    result = quantgate_cli.run("run", "--store", str(store), "--config", str(config), timeout=120)
    assert result.returncode == 2
    for text in expected:
        assert text in result.stderr
    assert len(result.stderr) < 2000  # the problem, not the config, is what the user reads
    assert set(os.listdir(versions_dir(store))) == before


@pytest.mark.parametrize("name", ["../x", "a..b"])  # the rest of the rule: tests/artifacts/test_store_names.py
def test_model_names_that_would_escape_the_store_are_refused(quantgate_cli, store, nothing_lost, name):
    result = quantgate_cli.run("run", "--store", str(store), "--model-name", name, timeout=120)
    assert result.returncode == 2 and "model_name" in result.stderr and repr(name) in result.stderr
    assert sorted(name for name in os.listdir(store) if not name.startswith(".")) == [MODEL]  # .cache: the search's


def test_calibration_smaller_than_the_requested_batches_stops_before_training(quantgate_cli, store, nothing_lost):
    before = set(os.listdir(versions_dir(store)))
    result = quantgate_cli.run("run", "--store", str(store), *TINY_RUN, "--set", "quantize.batch_size=32",
                               "--set", "quantize.batch_nums=1000")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "quantize.batch_nums=1000 with quantize.batch_size=32 needs 32000 calibration samples" in result.stderr
    assert "lower quantize.batch_nums or raise data.calibration_fraction" in result.stderr
    (record,) = new_versions(store, before)
    assert record["status"] == "error" and sorted(record["stages"]) == ["data"]  # nothing was trained


def test_a_learning_rate_that_makes_the_loss_nan_is_reported_as_divergence(quantgate_cli, store, nothing_lost):
    before = set(os.listdir(versions_dir(store)))
    result = quantgate_cli.run("run", "--store", str(store), *TINY_RUN, "--learning-rate", "1e38")
    assert result.returncode == 2, result.stderr[-2000:]
    # More steps skipped for inf/NaN gradients than the loss scaler may skip (train.amp.max_skipped_ratio).
    assert "planned training steps were skipped for inf/NaN gradients" in result.stderr
    assert "lower train.learning_rate (now 1e+38)" in result.stderr
    (record,) = new_versions(store, before)
    assert record["status"] == "error" and "train" not in record["stages"]


def _limit_file_size() -> None:
    # Any write past 256 KiB fails with EFBIG, as a full disk fails with ENOSPC; Python ignores SIGXFSZ.
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def test_a_store_that_runs_out_of_space_midway_fails_cleanly(quantgate_cli, store, nothing_lost):
    before = set(os.listdir(versions_dir(store)))
    result = quantgate_cli.run("run", "--store", str(store), *TINY_RUN, "--no-reuse", preexec_fn=_limit_file_size)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "the artifact store ran out of space while writing stage 'data'" in result.stderr
    assert "File too large" in result.stderr and "completed stages are reused" in result.stderr
    (record,) = new_versions(store, before)
    assert record["status"] == "error" and record["stages"] == {}


def test_an_unwritable_store_root_is_refused(quantgate_cli, tmp_path):
    if os.geteuid() != 0:
        read_only = tmp_path / "read-only"
        read_only.mkdir(mode=0o555)
        roots = [read_only, tmp_path / "a-file" / "store"]
    else:  # root writes through permission bits; sysfs refuses even root
        roots = [Path("/sys/quantgate-store"), tmp_path / "a-file" / "store"]
    (tmp_path / "a-file").write_text("not a folder")
    for root in roots:
        result = quantgate_cli.run("run", "--store", str(root), timeout=120)
        assert result.returncode == 2
        assert f"artifact store {root} is not writable" in result.stderr
        assert "pass --store DIR or set QUANTGATE_STORE" in result.stderr


def test_an_alias_to_a_version_that_does_not_exist(quantgate_cli, store, nothing_lost):
    promote = quantgate_cli.run("promote", "v99", "--store", str(store), timeout=120)
    assert promote.returncode == 2
    assert f"model '{MODEL}' has no version v99 in store {store} (existing versions: v1" in promote.stderr
    escape = quantgate_cli.run("promote", "../v1", "--store", str(store), timeout=120)
    assert escape.returncode == 2 and "version '../v1' is invalid" in escape.stderr
    with pytest.raises(ArtifactNotFound, match=r"has no version v99 .*existing versions: v1"):
        ArtifactStore(store).set_alias(MODEL, "release", "v99")
    dangling = store / MODEL / "aliases" / "staging.json"
    dangling.write_bytes(sealed_json({"alias": "staging", "model": MODEL, "version": "v99"}))
    try:
        found = quantgate_cli.run("fsck", "--store", str(store))
        assert found.returncode == 1
        assert f"dangling-alias     {MODEL}/aliases/staging.json: points at v99, which does not exist" in found.stdout
    finally:
        dangling.unlink()
