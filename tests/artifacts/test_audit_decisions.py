"""The audit log of alias moves, write-once gate decisions and lineage checks, on a real filesystem."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactError, ArtifactNotFound


def finished_version(store, commit_stage, model="m"):
    version = store.create_version(model)
    data = commit_stage(version, "data", {"splits.npz": b"split"})
    evaluate = commit_stage(version, "evaluate", {"predictions.npz": b"preds"}, {"int8_top1_pct": 90.0},
                            inputs={"data": data})
    store.finalize_version(version, {"status": "passed"})
    return version, data, evaluate


def test_every_alias_move_is_appended_to_the_audit_log(store, commit_stage):
    v1, _, _ = finished_version(store, commit_stage)
    v2, _, _ = finished_version(store, commit_stage)
    store.set_alias("m", "release", v1.version, reason="gate passed")
    store.set_alias("m", "release", v2.version, reason="promoted", action="promote", actor="ci@builder")
    store.set_alias("m", "latest", v2.version)
    entries = store.audit_log("m")
    assert [(e["alias"], e["from"], e["to"], e["action"]) for e in entries] == [
        ("release", None, "v1", "set"), ("release", "v1", "v2", "promote"), ("latest", None, "v2", "set")]
    assert entries[1]["who"] == "ci@builder" and entries[1]["why"] == "promoted" and entries[1]["model"] == "m"
    assert "@" in entries[0]["who"] and entries[0]["at"].endswith("+00:00")
    raw = (store.root / "m" / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in raw] == entries  # one JSON object per line


_MOVE_ALIASES = """
import sys, time
from quantgate.artifacts import ArtifactStore
root, start_at, who = sys.argv[1], float(sys.argv[2]), sys.argv[3]
store = ArtifactStore(root)
time.sleep(max(0.0, start_at - time.time()))
for i in range(20):
    store.set_alias("m", "release", "v1" if i % 2 else "v2", reason=f"{who} {i}", actor=who)
"""


def test_concurrent_alias_moves_each_log_one_whole_line_with_a_true_from(store, commit_stage):
    finished_version(store, commit_stage)
    finished_version(store, commit_stage)
    start_at = time.time() + 2.0
    workers = [subprocess.Popen([sys.executable, "-c", _MOVE_ALIASES, str(store.root), str(start_at), f"w{n}"])
               for n in range(3)]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0]
    entries = store.audit_log("m")
    assert len(entries) == 60
    # Moves were serialized: each line's "from" is the previous line's "to".
    assert all(entry["from"] == before["to"] for before, entry in zip(entries, entries[1:]))
    assert entries[-1]["to"] == store.alias("m", "release")


def test_a_broken_audit_line_is_reported_with_its_number(store, commit_stage):
    v1, _, _ = finished_version(store, commit_stage)
    store.set_alias("m", "release", v1.version)
    with open(store.root / "m" / "audit.jsonl", "a") as log:
        log.write("{not json\n")
    with pytest.raises(ArtifactCorrupt, match=r"line 2 of m/audit.jsonl"):
        store.audit_log("m")


def test_decisions_are_numbered_write_once_and_leave_the_version_untouched(store, commit_stage):
    version, _, evaluate = finished_version(store, commit_stage)
    before = {p: p.read_bytes() for p in (store.root / "m" / "versions" / "v1").rglob("*") if p.is_file()}
    first = store.record_decision(version, {"gate": {"passed": False}})
    second = store.record_decision(version, {"gate": {"passed": True}})
    assert (first, second) == ("m/versions/v1/decisions/0001.json", "m/versions/v1/decisions/0002.json")
    decisions = store.decisions(version)
    assert [(d["decision"], d["gate"]["passed"], d["version"]) for d in decisions] == [(1, False, "v1"), (2, True, "v1")]
    assert not stat.S_IMODE(os.stat(store.root / first).st_mode) & stat.S_IWUSR  # read-only
    assert all(path.read_bytes() == data for path, data in before.items())
    assert store.stage_ref(version, "evaluate") == evaluate  # decisions are not a stage
    with pytest.raises(ArtifactError, match="reserved"):
        store.write_stage(store.create_version("m"), "decisions", {}, {})


def test_decisions_need_a_finished_version(store):
    version = store.create_version("m")
    with pytest.raises(ArtifactError, match="not finalized"):
        store.record_decision(version, {"gate": {}})


def test_finalized_stage_ref_pins_the_digest_in_the_version_record(store, commit_stage):
    version, _, evaluate = finished_version(store, commit_stage)
    assert store.finalized_stage_ref(version, "evaluate") == evaluate
    unfinished = store.create_version("m")
    with pytest.raises(ArtifactNotFound, match="no finalized stage 'evaluate'"):
        store.finalized_stage_ref(unfinished, "evaluate")


def test_lineage_problems_name_an_input_that_changed_after_it_was_read(store, commit_stage):
    version, data, evaluate = finished_version(store, commit_stage)
    assert store.lineage_problems(evaluate) == []
    splits = store.root / "m" / "versions" / "v1" / "data" / "splits.npz"
    os.chmod(splits, 0o644)
    splits.write_bytes(b"other split")
    problems = store.lineage_problems(evaluate)
    assert len(problems) == 1 and "data/splits.npz" in problems[0] and "does not match its manifest" in problems[0]


# --- the alias and its audit line commit as one; decisions are trusted only when sealed ---------------

def released_twice(store, commit_stage):
    """v1, v2 and v3 finished and passed (each with a passing gate stage); release moved v1 -> v2 -> v1."""
    for _ in range(3):
        finished_version(store, commit_stage)
    for target in ("v1", "v2", "v1"):
        store.set_alias("m", "release", target, reason="setup")


_MOVE_UNDER_A_FILE_SIZE_LIMIT = """
import resource, sys
from quantgate.artifacts import ArtifactStore
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
try:
    ArtifactStore(sys.argv[1]).set_alias("m", "release", "v2", reason="under a file-size limit")
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(getattr(exc, "exit_code", 3))
"""


def test_running_out_of_space_in_the_audit_append_moves_nothing_and_says_so(store, commit_stage):
    released_twice(store, commit_stage)
    log = store.root / "m" / "audit.jsonl"
    before = log.read_bytes()
    limit = len(before) + 40  # room for 40 bytes of the next audit line, and for a whole alias file
    assert (store.root / "m" / "aliases" / "release.json").stat().st_size < limit
    moved = subprocess.run([sys.executable, "-c", _MOVE_UNDER_A_FILE_SIZE_LIMIT, str(store.root), str(limit)],
                           capture_output=True, text=True, timeout=60)
    print(moved.returncode, moved.stderr.strip().splitlines()[-1], "; release:", store.alias("m", "release"),
          "; log grew by", log.stat().st_size - len(before), "bytes")
    assert moved.returncode == 2 and "StoreFull" in moved.stderr and "no alias moved" in moved.stderr
    assert store.alias("m", "release") == "v1"
    assert log.read_bytes() == before  # no torn line left behind
    assert [e["to"] for e in store.audit_log("m")] == ["v1", "v2", "v1"]


def test_a_torn_last_audit_line_is_ignored_and_log_and_rollback_still_work(store, commit_stage, capsys):
    from quantgate.cli import main

    released_twice(store, commit_stage)
    log = store.root / "m" / "audit.jsonl"
    with open(log, "ab") as file:
        file.write(b'{"alias": "release", "from": "v1", "to": "v')  # a full disk tore the line: no newline
    assert main(["log", "--store", str(store.root)]) == 0
    assert capsys.readouterr().out.count("release:") == 3
    assert main(["rollback", "--store", str(store.root)]) == 0
    assert "release: m/v1 -> v2 (rollback" in capsys.readouterr().out
    assert store.alias("m", "release") == "v2"
    assert log.read_bytes().endswith(b"\n")  # the move cut the torn tail off before appending
    assert [(e["from"], e["to"]) for e in store.audit_log("m")][-1] == ("v1", "v2")


_KILLED_BETWEEN_THE_TWO_WRITES = """
import os, signal, sys
from quantgate.artifacts import ArtifactStore, releases

steps = []

def dies_on_the_second_step(step):
    def wrapper(*args, **kwargs):
        steps.append(step.__name__)
        if len(steps) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return step(*args, **kwargs)
    return wrapper

releases.write_alias = dies_on_the_second_step(releases.write_alias)
releases.append_line = dies_on_the_second_step(releases.append_line)
ArtifactStore(sys.argv[1]).set_alias("m", "release", "v2", reason="killed midway")
"""


def test_sigkill_between_the_audit_line_and_the_alias_file_leaves_them_agreeing(store, commit_stage):
    released_twice(store, commit_stage)
    killed = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_THE_TWO_WRITES, str(store.root)], timeout=60)
    assert killed.returncode == -9
    last = [e for e in store.audit_log("m") if e["alias"] == "release"][-1]
    print("release:", store.alias("m", "release"), "; last audit entry:", last["from"], "->", last["to"])
    assert store.alias("m", "release") == last["to"] == "v2"  # committed in the log, so finished on read
    store.set_alias("m", "release", "v3", reason="after the crash")
    entries = [e for e in store.audit_log("m") if e["alias"] == "release"]
    assert all(entry["from"] == before["to"] for before, entry in zip(entries, entries[1:]))
    assert store.alias("m", "release") == "v3"


def decided_version(store, commit_stage, status: str):
    """v1 and v2 finished; v2's run recorded `status` and its gate failed int8_top1_pct; release -> v1."""
    finished_version(store, commit_stage)
    version = store.create_version("m")
    data = commit_stage(version, "data", {"splits.npz": b"split"})
    evaluate = commit_stage(version, "evaluate", {"predictions.npz": b"preds"}, {"int8_top1_pct": 90.0},
                            inputs={"data": data})
    failing = {"passed": False, "criteria": [{"name": "int8_top1_pct", "passed": False}]}
    commit_stage(version, "gate", {"gate.json": b"{}"}, failing, inputs={"evaluate": evaluate})
    store.finalize_version(version, {"status": status, "gate": failing})
    store.set_alias("m", "release", "v1")
    return version, evaluate


def test_a_hand_edited_decision_is_refused_and_nothing_moves(store, commit_stage, capsys):
    from quantgate.cli import main

    version, evaluate = decided_version(store, commit_stage, "failed")
    failing = {"passed": False, "criteria": [{"name": "int8_top1_pct", "passed": False}]}
    where = store.record_decision(version, {"gate": failing, "evaluate_manifest_sha256": evaluate.manifest_sha256})
    decision = store.root / where
    os.chmod(decision, 0o644)
    decision.write_bytes(decision.read_bytes().replace(b'"passed": false', b'"passed": true'))  # valid JSON
    assert json.loads(decision.read_bytes())["gate"]["passed"] is True
    code = main(["promote", "v2", "--store", str(store.root)])
    err = capsys.readouterr().err
    print(code, err.strip()[:200])
    assert code == 1 and "m/versions/v2/decisions/0001.json changed after it was written" in err
    assert "quantgate fsck" in err and store.alias("m", "release") == "v1"
    with pytest.raises(ArtifactCorrupt, match="decisions/0001.json"):
        store.decisions(version)


def test_a_failed_run_passed_by_a_later_decision_is_promoted_and_fsck_agrees(store, commit_stage, capsys):
    from quantgate.cli import main

    version, evaluate = decided_version(store, commit_stage, "failed")
    passing = {"passed": True, "criteria": [{"name": "int8_top1_pct", "passed": True}]}
    store.record_decision(version, {"gate": passing, "evaluate_manifest_sha256": evaluate.manifest_sha256})
    assert main(["promote", "v2", "--store", str(store.root)]) == 0
    assert store.alias("m", "release") == "v2"
    code = main(["fsck", "--store", str(store.root)])
    out = capsys.readouterr().out
    print("fsck exit", code, [line for line in out.splitlines() if "release" in line])
    assert code == 0 and "release-not-passed" not in out
