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
