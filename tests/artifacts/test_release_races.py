"""Races on `release` and `latest` between real processes, held at file barriers inside the critical window."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactStore


def release_history(entries: list[dict]) -> list[str]:
    """The release targets the audit log implies, as rollback reads them: moves push, rollbacks pop."""
    stack: list[str] = []
    for entry in (e for e in entries if e["alias"] == "release"):
        if entry["action"] == "rollback":
            stack.pop()
        elif not stack or stack[-1] != entry["to"]:
            stack.append(entry["to"])
    return stack


def digits_test_split(tmp_path_factory) -> Path:
    """A real data stage of the built-in digits (the same split for every version below)."""
    from quantgate.config import DataConfig
    from quantgate.stages.data import prepare_data

    folder = tmp_path_factory.mktemp("data")
    prepare_data(DataConfig(), folder)
    return folder


@pytest.fixture(scope="module")
def digits_data(tmp_path_factory) -> Path:
    return digits_test_split(tmp_path_factory)


def version_with_evaluation(store, commit_stage, int8_top1: float, status: str | None = "passed", data=None):
    """A version with data, evaluate (INT8 top-1 about `int8_top1` on the digits' 360 test samples, predictions
    naming their samples) and a passing gate, finalized as `status` unless None."""
    import io

    import numpy as np

    from quantgate.stages.data import open_data
    from quantgate.stages.data.sample_ids import sample_ids

    version = store.create_version("m")
    files = {name.name: name.read_bytes() for name in Path(data).iterdir()} if data else {"splits.npz": b"split"}
    data_ref = commit_stage(version, "data", files)
    evaluate_files = {"predictions.npz": b"preds"}
    if data:
        stored = open_data(data)
        labels = stored.references("test")
        predicted = labels.copy()
        wrong = np.arange(len(labels))[: round(len(labels) * (100 - int8_top1) / 100)]
        predicted[wrong] = (predicted[wrong] + 1) % 10
        int8_top1 = 100.0 * float(np.mean(predicted == labels))
        buffer = io.BytesIO()
        np.savez(buffer, labels=labels, fp32_pred=predicted, int8_pred=predicted, sample_ids=sample_ids(stored, "test"))
        evaluate_files = {"predictions.npz": buffer.getvalue()}
    evaluate = commit_stage(version, "evaluate", evaluate_files,
                            {"int8_top1_pct": int8_top1, "primary_runtime": "onnxruntime"}, inputs={"data": data_ref})
    if status is not None:
        commit_stage(version, "gate", {"gate.json": b"{}"}, {"passed": True, "criteria": []},
                     inputs={"evaluate": evaluate})
        store.finalize_version(version, {"status": status})
    return version


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 60.0) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert process.poll() is None, f"exited with {process.returncode} before {path.name}: {process.communicate()}"
        assert time.time() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


# One run's last two steps, as the release flow takes them: read the release baseline and gate
# against it, then (once the test opens the barrier) publish: finalize and move the aliases.
_GATE_THEN_PUBLISH = """
import sys, tempfile, time
from pathlib import Path
from quantgate.artifacts import ArtifactStore
from quantgate.config import GatePolicy
from quantgate.flows.duel import score_release_now
from quantgate.flows.release import publish_record
from quantgate.stages.gate import decide

root, version, int8 = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = ArtifactStore(root)
ref = store.version("m", version)
policy = GatePolicy(min_speedup=0.0, require_ci_within_drop=False, max_release_regression=5.0)
metrics = {"fp32_top1_pct": int8, "int8_top1_pct": int8, "agreement": 1.0, "speedup_int8_vs_fp32": 2.0}
with tempfile.TemporaryDirectory() as scratch:  # the duel stage, against the release there is now
    duel = score_release_now(store, store.stage_ref(ref, "data"), store.stage_ref(ref, "evaluate"),
                             store.alias("m", "release"), Path(scratch))
    decision = decide(policy, metrics, release=duel)
Path(root, "read-" + version).touch()
while not Path(root, "go-" + version).exists():
    time.sleep(0.02)
record = {"status": "passed" if decision.passed else "failed", "gate": decision.metrics, "metrics": metrics}
final = publish_record(store, ref, record, policy)
print(final["status"])
"""


def test_two_runs_publishing_at_once_never_release_a_worse_run_nor_move_latest_back(store, commit_stage, digits_data):
    version_with_evaluation(store, commit_stage, 85.0, data=digits_data)
    store.set_alias("m", "release", "v1")
    store.set_alias("m", "latest", "v1")
    version_with_evaluation(store, commit_stage, 80.0, status=None, data=digits_data)  # v2: 5 pts below v1, allowed
    version_with_evaluation(store, commit_stage, 90.0, status=None, data=digits_data)  # v3: better than both
    runs = {version: subprocess.Popen([sys.executable, "-c", _GATE_THEN_PUBLISH, str(store.root), version, int8],
                                      stdout=subprocess.PIPE, text=True)
            for version, int8 in (("v2", "80"), ("v3", "90"))}
    for version, run in runs.items():  # both gated against v1 before either published
        wait_for(store.root / f"read-{version}", run)
    (store.root / "go-v3").touch()
    assert runs["v3"].wait(timeout=60) == 0 and runs["v3"].stdout.read().strip() == "passed"
    (store.root / "go-v2").touch()  # v2 publishes last, judged against v1 by its gate, but v3 is release now
    assert runs["v2"].wait(timeout=60) == 0
    print("v2 published as", runs["v2"].stdout.read().strip(), "; release:", store.alias("m", "release"),
          "; latest:", store.alias("m", "latest"))

    assert store.alias("m", "release") == "v3"  # v2 is 10 pts below v3, more than max_release_regression
    assert store.alias("m", "latest") == "v3"  # never backwards to the older v2
    record = store.version_record(store.version("m", "v2"))
    regression = next(c for c in record["gate"]["criteria"] if c["name"] == "release_regression_pts")
    assert record["status"] == "failed" and record["gate"]["passed"] is False
    # Judged again on the same 360 test samples, v3's stored predictions paired with v2's (no model run).
    assert regression["passed"] is False and regression["measured"] == pytest.approx(10.0, abs=0.3)
    assert "judged again: release moved from v1 to v3" in regression["note"]
    assert regression["note"].startswith("paired on 360 samples")
    assert record["gate"]["release_duel"]["version"] == "v3"
    assert [(e["alias"], e["from"], e["to"]) for e in store.audit_log("m")][-2:] == [
        ("latest", "v1", "v3"), ("release", "v1", "v3")]


def test_a_compare_and_set_move_refuses_when_the_alias_moved(store, commit_stage):
    from quantgate.artifacts.errors import AliasMoved

    for int8 in (85.0, 86.0):
        version_with_evaluation(store, commit_stage, int8)
    store.set_alias("m", "release", "v1")
    with pytest.raises(AliasMoved, match="points at v1, not at nothing as expected"):
        store.set_alias("m", "release", "v2", expected_previous=None)
    assert store.alias("m", "release") == "v1" and len(store.audit_log("m")) == 1
    assert store.set_alias("m", "release", "v2", expected_previous="v1") == "v1"


# `quantgate rollback`, held (up to 3 s, or until the test says go) right before it moves `release`.
_HELD_ROLLBACK = """
import sys, time
from pathlib import Path
from quantgate.artifacts import ArtifactStore
from quantgate.cli import main

root = sys.argv[1]

def held(move):
    def wrapper(*args, **kwargs):
        Path(root, "rollback-decided").touch()
        deadline = time.time() + 3.0
        while not Path(root, "promote-finished").exists() and time.time() < deadline:
            time.sleep(0.02)
        return move(*args, **kwargs)
    return wrapper

try:
    from quantgate.artifacts.releases import AliasMoves
    AliasMoves.move = held(AliasMoves.move)
except ImportError:  # the store before moves were decided under the alias lock
    ArtifactStore.set_alias = held(ArtifactStore.set_alias)
sys.exit(main(["rollback", "--store", root, "--model", "m"]))
"""


def test_a_rollback_racing_a_promotion_leaves_release_at_the_top_of_its_history(store, commit_stage):
    for int8 in (85.0, 86.0, 87.0):
        version_with_evaluation(store, commit_stage, int8)
    store.set_alias("m", "release", "v1")
    store.set_alias("m", "release", "v2")
    rollback = subprocess.Popen([sys.executable, "-c", _HELD_ROLLBACK, str(store.root)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(store.root / "rollback-decided", rollback)  # it read v1 <- v2 and chose v1
    promote = subprocess.run([sys.executable, "-m", "quantgate.cli", "promote", "v3", "--store", str(store.root),
                              "--model", "m"], capture_output=True, text=True, timeout=60)
    (store.root / "promote-finished").touch()
    assert rollback.wait(timeout=60) == 0, rollback.stderr.read()
    assert promote.returncode == 0, promote.stderr
    history = release_history(store.audit_log("m"))
    print("release:", store.alias("m", "release"), "; history the audit log implies:", history)
    assert store.alias("m", "release") == history[-1]
    # The rollback went first (v2 -> v1), then the promotion (v1 -> v3): the promotion was not undone.
    assert store.alias("m", "release") == "v3"
    assert [(e["from"], e["to"], e["action"]) for e in store.audit_log("m")][-2:] == [
        ("v2", "v1", "rollback"), ("v1", "v3", "promote")]


def test_deciding_under_the_alias_lock_sees_every_committed_move(store, commit_stage):
    version_with_evaluation(store, commit_stage, 85.0)
    version_with_evaluation(store, commit_stage, 86.0)
    other = ArtifactStore(store.root)
    with store.alias_moves("m") as moves:
        assert moves.current("release") is None and moves.history() == []
        moves.move("release", "v1", reason="first")
        assert other.alias("m", "release") == "v1"  # a reader in the same thread does not wait for itself
    assert [(e["to"], e["why"]) for e in store.audit_log("m")] == [("v1", "first")]
