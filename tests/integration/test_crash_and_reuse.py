"""SIGKILL inside each stage, then fsck and a rerun; reruns reuse what an earlier run computed."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from cli_runs import TINY_RUN, alias_bytes, copy_store, versions_dir


def manifest(store: Path, version: str, stage: str) -> dict:
    return json.loads((versions_dir(store) / version / stage / "manifest.json").read_text())


def run_seconds(output: str) -> float:
    return float(re.search(r"gate PASSED  \(([0-9.]+) s\)", output).group(1))


def kill_when(cli, store: Path, args: list[str], trigger: str) -> Path:
    """Start `quantgate run`, SIGKILL its process group the moment `trigger` (a glob inside the new
    version, e.g. ".staging-train-*") exists; return the new version's folder."""
    before = set(os.listdir(versions_dir(store)))
    process = cli.start("run", "--store", str(store), *TINY_RUN, *args)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            new = [versions_dir(store) / name for name in set(os.listdir(versions_dir(store))) - before]
            if new and any(new[0].glob(trigger)):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
                return new[0]
            if process.poll() is not None:
                break
            time.sleep(0.002)
        pytest.fail(f"the run ended before {trigger} appeared:\n{process.communicate()[0][-3000:]}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def assert_consistent_after_crash(cli, store: Path, aliases_before: dict[str, bytes], version_dir: Path) -> str:
    """fsck finds only what a crash leaves (orphans, an interrupted version), --repair removes the
    orphans, and after that the store is clean; aliases never moved. Returns fsck's first report."""
    found = cli.run("fsck", "--store", str(store))
    kinds = {line.split()[1] for line in found.stdout.splitlines() if line.startswith(("error", "warning"))}
    assert kinds <= {"orphan-staging", "orphan-temp", "incomplete-version"}, found.stdout
    assert found.returncode == (1 if kinds & {"orphan-staging", "orphan-temp"} else 0), found.stdout
    repaired = cli.run("fsck", "--store", str(store), "--repair")
    assert repaired.returncode == 0, repaired.stdout
    assert " 0 error(s)" in repaired.stdout
    assert not list(version_dir.glob(".staging-*")) and not list(version_dir.glob(".*.tmp"))
    # Every committed stage that survived is intact and the version never claims to be complete.
    assert not (version_dir / "version.json").exists() or "incomplete" not in repaired.stdout
    assert alias_bytes(store) == aliases_before
    return found.stdout


@pytest.fixture(scope="module")
def store(released_store, tmp_path_factory) -> Path:
    return copy_store(released_store.root, tmp_path_factory.mktemp("crash") / "store")


def test_a_rerun_with_the_same_inputs_reuses_every_stage_up_to_the_evaluation(quantgate_cli, store, released_store):
    result = quantgate_cli.run("run", "--store", str(store), *TINY_RUN)
    assert result.returncode == 0, result.stdout[-3000:]
    for stage in ("data", "train", "export", "quantize", "convert"):
        stage_manifest = manifest(store, "v2", stage)
        assert stage_manifest["reused_from"]["version"] == "v1", stage
        assert stage_manifest["input_digest"] == manifest(store, "v1", stage)["input_digest"]
        assert stage_manifest["files"] == manifest(store, "v1", stage)["files"]
        assert f"{stage}: reused from v1 (inputs digest {stage_manifest['input_digest'][:12]}" in result.stderr
    # Latency belongs to this run's machine and the gate to this run's policy: both always run afresh.
    assert manifest(store, "v2", "evaluate")["reused_from"] is None
    assert manifest(store, "v2", "gate")["reused_from"] is None
    assert manifest(store, "v2", "train")["duration_s"] < 1.0  # a copy, not a training run
    assert f"{'train':<9}" in result.stdout and "(reused from v1)" in result.stdout
    print(f"fresh run {run_seconds(released_store.run_output)} s, rerun with reuse {run_seconds(result.stdout)} s")


def test_killed_in_quantization_then_rerun_retrains_nothing(quantgate_cli, store):
    aliases = alias_bytes(store)
    changed_quantize = ["--set", "quantize.batch_size=4", "--set", "quantize.hist_percent=0.999"]
    crashed = kill_when(quantgate_cli, store, changed_quantize, ".staging-quantize-*")
    assert sorted(p.name for p in crashed.iterdir() if not p.name.startswith(".")) == ["data", "export", "train"]
    assert_consistent_after_crash(quantgate_cli, store, aliases, crashed)

    rerun = quantgate_cli.run("run", "--store", str(store), *TINY_RUN, *changed_quantize)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    version = re.search(r"quantgate digits-cnn/(v\d+): gate", rerun.stdout).group(1)
    for stage in ("data", "train", "export"):
        assert manifest(store, version, stage)["reused_from"] is not None, stage
    for stage in ("quantize", "convert", "evaluate"):  # a changed input recomputes from there on
        assert manifest(store, version, stage)["reused_from"] is None, stage
    assert "quantize: computed" in rerun.stderr and "train: reused from" in rerun.stderr
    assert quantgate_cli.run("fsck", "--store", str(store)).returncode == 0


@pytest.mark.parametrize(("stage", "args"), [
    # --no-reuse: every stage recomputes, even the data split an earlier run already made.
    ("train", ["--no-reuse", "--epochs", "8"]),
    ("evaluate", ["--set", "evaluate.latency_repeats=3000"]),
])
def test_killed_inside_a_stage_leaves_only_repairable_orphans(quantgate_cli, store, stage, args):
    aliases = alias_bytes(store)
    crashed = kill_when(quantgate_cli, store, args, f".staging-{stage}-*")
    report = assert_consistent_after_crash(quantgate_cli, store, aliases, crashed)
    assert f"{crashed.relative_to(store).as_posix()}/.staging-{stage}-" in report
    assert not (crashed / stage).exists() and not (crashed / "version.json").exists()
    listing = json.loads(quantgate_cli.run("versions", "--store", str(store), "--json").stdout)
    assert {entry["version"]: entry["status"] for entry in listing}[crashed.name] == "incomplete"
    if "--no-reuse" in args:
        assert json.loads((crashed / "data" / "manifest.json").read_text())["reused_from"] is None


def test_two_runs_at_once_get_distinct_versions_and_whole_aliases(quantgate_cli, store):
    before = set(os.listdir(versions_dir(store)))
    processes = [quantgate_cli.start("run", "--store", str(store), *TINY_RUN) for _ in range(2)]
    outputs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    made = sorted(re.search(r"quantgate digits-cnn/(v\d+): gate PASSED", out).group(1) for out in outputs)
    assert len(set(made)) == 2 and set(made) == set(os.listdir(versions_dir(store))) - before
    aliases = {name: json.loads(data)["version"] for name, data in alias_bytes(store).items()}
    assert aliases["latest.json"] in made and aliases["release.json"] in made
    assert quantgate_cli.run("fsck", "--store", str(store)).returncode == 0
