"""`quantgate gate / promote / rollback / log` on a store of real stage outputs."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactStore
from quantgate.cli import main
from quantgate.config import GatePolicy
from quantgate.flows.duel import release_model, score_release_now
from quantgate.flows.evidence import gate_evidence
from quantgate.stages.gate.decision import gate

MODEL = "digits-cnn"
STAGE_INPUTS = {"data": (), "train": ("data",), "export": ("train", "data"), "quantize": ("export", "data"),
                "convert": ("export", "quantize"), "evaluate": ("convert", "data")}


def add_version(store: ArtifactStore, stage_dirs, policy: GatePolicy) -> str:
    """Commit the session's real stage outputs as a new version and gate it, as the release flow does."""
    version = store.create_version(MODEL)
    refs = {}
    for stage, inputs in STAGE_INPUTS.items():
        with store.write_stage(version, stage, {}, {name: refs[name] for name in inputs}) as writer:
            shutil.copytree(getattr(stage_dirs, stage), writer.dir, dirs_exist_ok=True)
            writer.metrics.update(stage_dirs.results[stage].metrics)
        refs[stage] = writer.ref
    metrics, predictions, stale = gate_evidence(store, refs["evaluate"])
    with (tempfile.TemporaryDirectory() as scratch,
          store.write_stage(version, "gate", policy.model_dump(mode="json"), {"evaluate": refs["evaluate"]}) as writer):
        duel = score_release_now(store, refs["data"], refs["evaluate"], store.alias(MODEL, "release"), Path(scratch))
        decision = gate(policy, metrics, writer.dir, predictions, duel, stale)
        writer.metrics.update(decision.metrics)
    status = "passed" if decision.passed else "failed"
    store.finalize_version(version, {"status": status, "gate": decision.metrics,
                                     "config": {"gate": policy.model_dump(mode="json")}})
    store.set_alias(MODEL, "latest", version.version, reason=f"run finished: gate {status}")
    if decision.passed:
        store.set_alias(MODEL, "release", version.version, reason="gate passed")
    return version.version


@pytest.fixture(scope="module")
def store(stage_dirs, tmp_path_factory):
    """v1 passed, v2 failed (INT8 floor of 100 %), v3 passed and is the release."""
    store = ArtifactStore(tmp_path_factory.mktemp("release-store"))
    # The session's tiny model is timed once on a busy test machine: its speedup is noise, so these versions waive it.
    demo = GatePolicy(min_speedup=0.0)
    assert [add_version(store, stage_dirs, policy) for policy in
            (demo, demo.model_copy(update={"min_int8_accuracy": 100.0}), demo)] == ["v1", "v2", "v3"]
    return store


def quantgate(store: ArtifactStore, *args: str) -> int:
    return main([*args, "--store", str(store.root)])


def failed_criteria(message: str, decided_by: str) -> set[str]:
    """The criteria a refusal names after `decided_by: failed ` (INT8 numerics vary by CPU, so others may join)."""
    found = re.search(re.escape(decided_by) + r": failed ([a-z0-9_, ]+)", message)
    assert found, f"no '{decided_by}: failed ...' in {message!r}"
    return set(found.group(1).split(", "))


def release_moves(store: ArtifactStore) -> list[tuple]:
    return [(e["from"], e["to"], e["action"]) for e in store.audit_log(MODEL) if e["alias"] == "release"]


def test_a_failed_version_is_refused_then_released_after_deciding_it_again(store, capsys):
    v2 = Path(store.root / MODEL / "versions" / "v2")
    frozen = {path: path.read_bytes() for path in (v2 / "version.json", v2 / "gate" / "gate.json")}

    assert quantgate(store, "promote", "v2") == 1
    err = capsys.readouterr().err
    assert "refusing to promote digits-cnn/v2 to release" in err
    assert "int8_top1_pct" in failed_criteria(err, "the run's gate")
    assert store.alias(MODEL, "release") == "v3" and release_moves(store)[-1] == ("v1", "v3", "set")

    assert quantgate(store, "gate", "v2", "--set", "gate.min_int8_accuracy=0") == 0
    out = capsys.readouterr().out
    assert "digits-cnn/v2: gate PASSED (decided again)" in out and "decisions/0001.json" in out
    decision = json.loads((v2 / "decisions" / "0001.json").read_text())
    assert decision["gate"]["passed"] is True and decision["gate"]["policy"]["min_int8_accuracy"] == 0
    assert decision["gate"]["release_duel"]["version"] == "v3"
    assert all(path.read_bytes() == data for path, data in frozen.items())  # the old record is immutable

    assert quantgate(store, "promote", "v2", "--reason", "floor was a typo") == 0
    assert store.alias(MODEL, "release") == "v2"
    last = store.audit_log(MODEL)[-1]
    assert (last["from"], last["to"], last["action"], last["why"]) == ("v3", "v2", "promote", "floor was a typo")
    assert "@" in last["who"]


def test_rollback_walks_back_through_release_history(store, capsys):
    assert store.alias(MODEL, "release") == "v2"
    assert quantgate(store, "rollback") == 0
    assert store.alias(MODEL, "release") == "v3"
    assert quantgate(store, "rollback") == 0
    assert store.alias(MODEL, "release") == "v1"
    assert quantgate(store, "rollback") == 1
    assert "no earlier target than v1" in capsys.readouterr().err
    assert store.alias(MODEL, "release") == "v1"
    assert release_moves(store)[-2:] == [("v2", "v3", "rollback"), ("v3", "v1", "rollback")]


def test_a_stricter_policy_fails_and_blocks_promotion(store, tmp_path, capsys):
    policy = tmp_path / "strict.yaml"
    # No INT8 model is a thousand times faster than its FP32 twin: this policy cannot pass.
    policy.write_text("gate:\n  max_accuracy_drop: 0\n  require_ci_within_drop: true\n  min_speedup: 1000\n")
    assert quantgate(store, "gate", "v3", "--policy", str(policy)) == 1
    assert "(must be >= 1000) FAILED" in capsys.readouterr().out
    moves = release_moves(store)
    assert quantgate(store, "promote", "v3") == 1
    # An AVX2-only CPU also loses INT8 accuracy, so the drop criteria may fail beside speedup.
    assert "speedup" in failed_criteria(capsys.readouterr().err, "decision 1 (quantgate gate)")
    assert release_moves(store) == moves


def test_a_changed_input_makes_the_evidence_stale(store, capsys):
    onnx = store.root / MODEL / "versions" / "v1" / "convert" / "int8.onnx"
    original = onnx.read_bytes()
    os.chmod(onnx, 0o644)
    onnx.write_bytes(original + b"\0")
    try:
        assert quantgate(store, "gate", "v1") == 1
        out = capsys.readouterr().out
        assert "stale_evidence = 1 problems (must be <= 0) FAILED" in out and "convert/int8.onnx" in out
        moves = release_moves(store)
        assert quantgate(store, "promote", "v1") == 1
        assert "its evaluation cannot be trusted" in capsys.readouterr().err
        assert release_moves(store) == moves
        assert quantgate(store, "promote", "v3") == 1  # v3's own decision failed above
    finally:
        onnx.write_bytes(original)
        os.chmod(onnx, 0o444)


def test_a_release_that_cannot_be_verified_fails_the_regression_criterion(store, capsys):
    released = store.alias(MODEL, "release")
    manifest = store.root / MODEL / "versions" / released / "evaluate" / "manifest.json"
    original = manifest.read_bytes()
    os.chmod(manifest, 0o644)
    manifest.write_bytes(original.replace(b'"int8_top1_pct": ', b'"int8_top1_pct": 1'))
    try:
        model, _ = release_model(store, MODEL, released)
        assert "its evaluate stage is unusable" in model.problem and "changed after it was committed" in model.problem
        other = "v3" if released != "v3" else "v1"
        assert quantgate(store, "gate", other, "--set", "gate.max_release_regression=100") == 1
        out = capsys.readouterr().out
        assert (f"release_regression_pts = missing pts (must be <= 100) FAILED: release {released} cannot be scored "
                "on this version's test samples: its evaluate stage is unusable") in out
    finally:
        manifest.write_bytes(original)
        os.chmod(manifest, 0o444)


def test_bad_input_exits_2_and_the_log_shows_every_move(store, tmp_path, capsys):
    decided = len(store.decisions(store.version(MODEL, "v1")))
    assert quantgate(store, "gate", "v9") == 2
    assert "no version v9" in capsys.readouterr().err
    assert quantgate(store, "gate", "v1", "--set", "gate.min_agreement=2", "--set", "train.epochs=1") == 2
    err = capsys.readouterr().err
    assert "train.epochs=1" in err and "only gate.* settings" in err
    assert quantgate(store, "gate", "v1", "--set", "gate.min_agreement=2") == 2
    assert "gate.min_agreement" in capsys.readouterr().err
    pipeline_file = tmp_path / "release.yaml"
    pipeline_file.write_text("train:\n  epochs: 3\ngate:\n  min_agreement: 0.9\n")
    assert quantgate(store, "gate", "v1", "--policy", str(pipeline_file)) == 2
    assert "train: does not apply when deciding again" in capsys.readouterr().err
    assert len(store.decisions(store.version(MODEL, "v1"))) == decided  # refused before deciding anything

    assert quantgate(store, "log", "--json") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == store.audit_log(MODEL) and {"at", "who", "model", "alias", "from", "to", "why"} <= set(lines[0])


def test_the_console_script_exits_1_on_a_failed_decision_and_a_refused_promotion(store):
    script = Path(sys.executable).parent / "quantgate"

    def run(*args):
        return subprocess.run([str(script), *args, "--store", str(store.root), "--model", MODEL],
                              capture_output=True, text=True, timeout=300)

    decided = run("gate", "v2", "--set", "gate.min_int8_accuracy=100")
    assert decided.returncode == 1 and "digits-cnn/v2: gate FAILED (decided again)" in decided.stdout
    refused = run("promote", "v2")
    assert refused.returncode == 1
    assert "quantgate: refusing to promote digits-cnn/v2 to release" in refused.stderr
    assert "int8_top1_pct" in failed_criteria(refused.stderr, "decision 2 (quantgate gate)")
