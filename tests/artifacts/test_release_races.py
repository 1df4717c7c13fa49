"""Races on `release` and `latest` between real processes, held at file barriers inside the critical window.

Every test runs against the local store (a folder, moves serialized by the alias lock) and the S3
store (a real bucket, moves optimistic: a move whose audit number was taken fails with AliasMoved
if its alias moved meanwhile). Each process gets its own S3 mirror, as a worker on its own machine
would; the barrier files live in a folder of their own, never in the store.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantgate.artifacts import ArtifactStore, is_s3


@pytest.fixture
def store(open_worker) -> ArtifactStore:
    return open_worker("test")


@pytest.fixture
def signals(tmp_path) -> Path:
    """Where the processes and the test signal each other (read-/go- files): outside the store."""
    folder = tmp_path / "signals"
    folder.mkdir()
    return folder


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

    from quantgate.samples.sample_ids import sample_ids
    from quantgate.stages.data import open_data

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
from quantgate.artifacts import open_store
from quantgate.config import GatePolicy
from quantgate.flows.duel import score_release_now
from quantgate.flows.release import publish_record
from quantgate.stages.gate import decide

spec, signals, version, int8 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
store = open_store(spec)
ref = store.version("m", version)
policy = GatePolicy(min_speedup=0.0, require_ci_within_drop=False, max_release_regression=5.0)
metrics = {"fp32_top1_pct": int8, "int8_top1_pct": int8, "agreement": 1.0, "speedup_int8_vs_fp32": 2.0}
with tempfile.TemporaryDirectory() as scratch:  # the duel stage, against the release there is now
    duel = score_release_now(store, store.stage_ref(ref, "data"), store.stage_ref(ref, "evaluate"),
                             store.alias("m", "release"), Path(scratch))
    decision = decide(policy, metrics, release=duel)
Path(signals, "read-" + version).touch()
while not Path(signals, "go-" + version).exists():
    time.sleep(0.02)
record = {"status": "passed" if decision.passed else "failed", "gate": decision.metrics, "metrics": metrics}
final = publish_record(store, ref, record, policy)
print(final["status"])
"""


def test_two_runs_publishing_at_once_never_release_a_worse_run_nor_move_latest_back(store, commit_stage, digits_data,
                                                                                    spec, signals, worker_env):
    version_with_evaluation(store, commit_stage, 85.0, data=digits_data)
    store.set_alias("m", "release", "v1")
    store.set_alias("m", "latest", "v1")
    version_with_evaluation(store, commit_stage, 80.0, status=None, data=digits_data)  # v2: 5 pts below v1, allowed
    version_with_evaluation(store, commit_stage, 90.0, status=None, data=digits_data)  # v3: better than both
    runs = {version: subprocess.Popen([sys.executable, "-c", _GATE_THEN_PUBLISH, spec, str(signals), version, int8],
                                      stdout=subprocess.PIPE, text=True, env=worker_env(version))
            for version, int8 in (("v2", "80"), ("v3", "90"))}
    for version, run in runs.items():  # both gated against v1 before either published
        wait_for(signals / f"read-{version}", run, seconds=180)  # importing paddle takes a while on a busy machine
    (signals / "go-v3").touch()
    assert runs["v3"].wait(timeout=120) == 0 and runs["v3"].stdout.read().strip() == "passed"
    (signals / "go-v2").touch()  # v2 publishes last, judged against v1 by its gate, but v3 is release now
    assert runs["v2"].wait(timeout=120) == 0
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
from quantgate.artifacts.releases import AliasMoves
from quantgate.artifacts.s3.moves import S3AliasMoves
from quantgate.cli import main

spec, signals = sys.argv[1], sys.argv[2]

def held(move):
    def wrapper(*args, **kwargs):
        Path(signals, "rollback-decided").touch()
        deadline = time.time() + 3.0
        while not Path(signals, "promote-finished").exists() and time.time() < deadline:
            time.sleep(0.02)
        return move(*args, **kwargs)
    return wrapper

AliasMoves.move = held(AliasMoves.move)
S3AliasMoves.move = held(S3AliasMoves.move)
sys.exit(main(["rollback", "--store", spec, "--model", "m"]))
"""


def unbroken(entries: list[dict], alias: str) -> bool:
    """Whether each move of `alias` starts exactly where the move before it left the alias."""
    moves = [entry for entry in entries if entry["alias"] == alias]
    return [entry["from"] for entry in moves] == [None] + [entry["to"] for entry in moves[:-1]]


def test_a_rollback_racing_a_promotion_leaves_release_at_the_top_of_its_history(store, commit_stage, spec, signals,
                                                                                worker_env):
    for int8 in (85.0, 86.0, 87.0):
        version_with_evaluation(store, commit_stage, int8)
    store.set_alias("m", "release", "v1")
    store.set_alias("m", "release", "v2")
    rollback = subprocess.Popen([sys.executable, "-c", _HELD_ROLLBACK, spec, str(signals)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=worker_env("rollback"))
    wait_for(signals / "rollback-decided", rollback, seconds=180)  # it read v1 <- v2 and chose v1
    promote = subprocess.run([sys.executable, "-m", "quantgate.cli", "promote", "v3", "--store", spec,
                              "--model", "m"], capture_output=True, text=True, timeout=180, env=worker_env("promote"))
    (signals / "promote-finished").touch()
    _, rollback_err = rollback.communicate(timeout=120)
    assert promote.returncode == 0, promote.stderr
    log = store.audit_log("m")
    history = release_history(log)
    print("release:", store.alias("m", "release"), "; history the audit log implies:", history,
          "; rollback said:", rollback_err.strip())
    # The promotion is never undone, and every move's "from" is where the move before it left `release`.
    assert store.alias("m", "release") == history[-1] == "v3"
    assert unbroken(log, "release")
    moves = [(e["from"], e["to"], e["action"]) for e in log]
    if is_s3(spec):
        # No lock to wait for: the promotion committed while the rollback was deciding, so the rollback,
        # decided on v2, is refused and moves nothing (rolling back now would undo a move it never saw).
        assert rollback.returncode != 0 and "moved to v3" in rollback_err and "nothing moved" in rollback_err
        assert moves[-1] == ("v2", "v3", "promote") and len(moves) == 3
    else:
        # The promotion waited for the rollback's lock: the rollback went first (v2 -> v1), then v1 -> v3.
        assert rollback.returncode == 0, rollback_err
        assert moves[-2:] == [("v2", "v1", "rollback"), ("v1", "v3", "promote")]


def test_deciding_under_the_alias_lock_sees_every_committed_move(store, commit_stage, open_worker):
    version_with_evaluation(store, commit_stage, 85.0)
    version_with_evaluation(store, commit_stage, 86.0)
    other = open_worker("other")
    with store.alias_moves("m") as moves:
        assert moves.current("release") is None and moves.history() == []
        moves.move("release", "v1", reason="first")
        assert other.alias("m", "release") == "v1"  # a reader in the same thread does not wait for itself
    assert [(e["to"], e["why"]) for e in store.audit_log("m")] == [("v1", "first")]
