"""The `quantgate` console command as a user runs it: real processes, real exit codes."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from quantgate import cli

TINY_RUN = ["--epochs", "3", "--set", "evaluate.latency_repeats=3", "--set", "gate.min_speedup=0"]


def quantgate(*args: str, home: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    beside_python = Path(sys.executable).parent / "quantgate"
    executable = str(beside_python) if beside_python.exists() else shutil.which("quantgate")
    assert executable, "the quantgate console script is not installed (pip install -e .)"
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect"), "HOME": str(home),
           # The embedded server's 20 s default is too short on a loaded 2-core CI machine.
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    env.pop("PREFECT_API_URL", None)  # the embedded temporary server, as on a fresh machine
    return subprocess.run([executable, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


def test_run_releases_then_a_failing_gate_exits_non_zero_and_moves_nothing(home):
    store = home / "store"
    passed = quantgate("run", "--store", str(store), *TINY_RUN, home=home)
    assert passed.returncode == 0, passed.stderr[-3000:]
    assert "quantgate digits-cnn/v1: gate PASSED" in passed.stdout
    assert f"stored in {store / 'digits-cnn' / 'versions' / 'v1'}" in passed.stdout
    assert "effective: False" in passed.stdout and "aliases   latest, release" in passed.stdout
    assert "train epoch 3/3: loss" in passed.stderr  # stage progress reaches the console through Prefect's logging

    failed = quantgate("run", "--store", str(store), *TINY_RUN, "--set", "gate.min_int8_accuracy=100",
                       "--learning-rate", "1e-9", "--epochs", "1", home=home)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "release gate failed for digits-cnn/v2: int8_top1_pct" in failed.stderr
    assert "must be >= 100" in failed.stderr and "'release' was not moved" in failed.stderr

    listing = quantgate("versions", "--store", str(store), "--json", home=home)
    assert listing.returncode == 0
    versions = {entry["version"]: entry for entry in json.loads(listing.stdout)}
    assert versions["v1"]["status"] == "passed" and "release" in versions["v1"]["aliases"]
    assert versions["v2"]["status"] == "failed" and versions["v2"]["aliases"] == ["latest"]
    assert versions["v2"]["gate"]["passed"] is False


def test_invalid_values_are_refused_before_anything_runs(home, tmp_path):
    store = tmp_path / "store"
    result = quantgate("run", "--store", str(store), "--epochs", "0", "--amp-level", "O3",
                       "--max-accuracy-drop", "150", "--set", "train.amp.dtyp=float16", home=home, timeout=120)
    assert result.returncode == 2
    for expected in ("train.epochs", "train.amp.level", "'O1' or 'O2'", "gate.max_accuracy_drop",
                     "train.amp.dtyp: unknown key"):
        assert expected in result.stderr
    assert not store.exists()  # no store, no version, no Prefect run
    assert "Starting temporary server" not in result.stderr


def test_unknown_dataset_and_unwritable_store_are_clear_errors(home, tmp_path):
    unknown = quantgate("run", "--store", str(tmp_path / "s"), "--set", "data.dataset=mnist", home=home, timeout=120)
    assert unknown.returncode == 2 and "data.dataset" in unknown.stderr and "'digits'" in unknown.stderr

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    unwritable = quantgate("run", "--store", str(blocker / "store"), home=home, timeout=120)
    assert unwritable.returncode == 2
    assert str(blocker / "store") in unwritable.stderr and "--store" in unwritable.stderr
    assert "QUANTGATE_STORE" in unwritable.stderr


def test_an_unforeseen_error_exits_3_never_1(monkeypatch, tmp_path, capsys):
    # A CI job must not read a crash as "the gate failed": anything that is not a QuantgateError exits 3.
    def broken(args):
        raise KeyError("something nobody planned for")

    monkeypatch.setattr(cli.versions, "handle", broken)
    assert cli.main(["versions", "--store", str(tmp_path / "store")]) == 3
    err = capsys.readouterr().err
    assert "KeyError: 'something nobody planned for'" in err and "Run quantgate fsck" in err


def test_an_unforeseen_error_is_one_line_naming_the_file_with_its_traceback(monkeypatch, tmp_path, capsys):
    def broken(args):
        raise RuntimeError("disk controller on fire")

    monkeypatch.setattr(cli.versions, "handle", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the system temp folder, private to this test
    assert cli.main(["versions", "--store", str(tmp_path / "store")]) == 3
    (line,) = capsys.readouterr().err.splitlines()  # one line, no traceback on the terminal
    assert line.startswith("quantgate: the command broke (RuntimeError: disk controller on fire); the traceback is in ")
    assert line.endswith(". Run quantgate fsck to check the store, and report the traceback.")
    (log,) = tmp_path.glob("quantgate-crash-*.log")
    assert str(log) in line
    assert "Traceback (most recent call last)" in log.read_text() and "in broken" in log.read_text()


@pytest.mark.parametrize("command", [["versions"], ["log"], ["promote", "v1"], ["rollback"], ["gate", "v1"]])
def test_commands_other_than_run_create_no_store_at_a_mistyped_path(home, tmp_path, command):
    typo = tmp_path / "stroe"
    missing = quantgate(*command, "--store", str(typo), home=home, timeout=120)
    assert missing.returncode == 2, missing.stderr
    assert f"no artifact store at {typo}: the path does not exist" in missing.stderr and "--store" in missing.stderr
    assert not typo.exists()  # nothing created: no folder, no aliases, no audit log

    elsewhere = tmp_path / "dataset"  # a folder that exists but holds no store
    (elsewhere / "images").mkdir(parents=True)
    wrong = quantgate(*command, "--store", str(elsewhere), home=home, timeout=120)
    assert wrong.returncode == 2, wrong.stderr
    assert f"{elsewhere} is not an artifact store: it holds images" in wrong.stderr
    assert sorted(os.listdir(elsewhere)) == ["images"] and os.listdir(elsewhere / "images") == []


def test_versions_shows_each_runtimes_verdict_side_by_side(tmp_path, capsys):
    from quantgate.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path / "store")
    numbers = {"fp32_top1_pct": 97.5, "int8_top1_pct": 97.0, "accuracy_delta_pts": -0.5, "speedup_int8_vs_fp32": 1.8}
    runtimes = {"onnxruntime": {**numbers, "passed": True, "failed": []},
                "openvino": {**numbers, "int8_top1_pct": 97.2, "speedup_int8_vs_fp32": 2.5, "passed": True, "failed": []},
                "paddle_inference": {**numbers, "int8_top1_pct": 94.0, "passed": False,
                                     "failed": ["paddle_inference.accuracy_drop_pts"]}}
    for record in ({"status": "passed", "metrics": numbers, "runtimes": {"onnxruntime": runtimes["onnxruntime"]}},
                   {"status": "failed", "metrics": numbers, "runtimes": runtimes}):
        store.finalize_version(store.create_version("m"), record)
    assert cli.main(["versions", "--store", str(store.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[1].split()[:3] == ["m", "v1", "passed"]  # one runtime: one line, as before
    assert lines[2].split()[:3] == ["m", "v2", "failed"]
    assert lines[3].split("runtimes: ")[1] == ("onnxruntime passed 97.00 % 1.80x | openvino passed 97.20 % 2.50x | "
                                               "paddle_inference FAILED 94.00 % 1.80x")
    assert cli.main(["versions", "--store", str(store.root), "--json"]) == 0
    listed = {entry["version"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed["v2"]["runtimes"]["paddle_inference"]["failed"] == ["paddle_inference.accuracy_drop_pts"]
