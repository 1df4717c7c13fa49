"""Many processes on one store: concurrent alias moves are never lost, and SIGKILL at any moment
leaves nothing that looks complete but is not."""

import os
import random
import signal
import subprocess
import sys
import time

from quantgate.artifacts import ArtifactStore
from quantgate.artifacts.fsck import check_store, repair

_MOVE_RELEASE = """
import sys, time
from quantgate.artifacts import ArtifactStore
root, start_at, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
store = ArtifactStore(root)
time.sleep(max(0.0, start_at - time.time()))  # line the processes up so they really race
for _ in range(rounds):
    version = store.create_version("m")
    with store.write_stage(version, "gate", config={}, inputs={}) as writer:
        (writer.dir / "gate.json").write_text("{}")
    store.finalize_version(version, {"status": "passed"})
    previous = store.set_alias("m", "release", version.version, reason="race")
    print(previous or "-", version.version, flush=True)
"""


def test_concurrent_alias_moves_form_one_unbroken_chain(tmp_path):
    root, rounds, workers = tmp_path / "store", 6, 4
    start_at = str(time.time() + 1.5)
    processes = [subprocess.Popen([sys.executable, "-c", _MOVE_RELEASE, str(root), start_at, str(rounds)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(workers)]
    moves = [line.split() for process in processes for line in process.communicate(timeout=120)[0].splitlines()]
    assert [process.returncode for process in processes] == [0] * workers
    new = [to for _, to in moves]
    previous = [before for before, _ in moves]
    assert sorted(new, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(1, rounds * workers + 1)]
    # Each move replaced exactly the target the move before it set: no lost or duplicated update.
    assert previous.count("-") == 1 and len(set(previous)) == len(previous)
    assert set(previous) - {"-"} < set(new)
    store = ArtifactStore(root)
    assert store.alias("m", "release") == (set(new) - set(previous)).pop()
    assert check_store(store) == []


_WRITE_FOREVER = """
import sys
from quantgate.artifacts import ArtifactStore
store = ArtifactStore(sys.argv[1])
payload = bytes(range(256)) * 2048  # 512 KiB per file: writes take long enough to be interrupted
while True:
    version = store.create_version("m")
    with store.hold_version(version):
        refs = {}
        for stage in ("train", "export", "quantize"):
            with store.write_stage(version, stage, config={}, inputs=dict(refs)) as writer:
                for name in ("a.bin", "b.bin"):
                    (writer.dir / name).write_bytes(payload)
            refs[stage] = writer.ref
        store.finalize_version(version, {"status": "passed"})
        for alias in ("latest", "release", "latest"):
            store.set_alias("m", alias, version.version)
"""


def test_sigkill_at_random_moments_leaves_a_consistent_store(tmp_path):
    root = tmp_path / "store"
    rng = random.Random(5)
    ArtifactStore(root)
    for _ in range(8):
        process = subprocess.Popen([sys.executable, "-c", _WRITE_FOREVER, str(root)], start_new_session=True)
        time.sleep(rng.uniform(0.3, 0.9))
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        store = ArtifactStore(root)
        problems = check_store(store)
        assert {p.kind for p in problems} <= {"orphan-staging", "orphan-temp", "incomplete-version"}, problems
        repair(store, problems)
        assert all(p.severity == "warning" for p in check_store(store))
        for alias in ("latest", "release"):
            target = store.alias("m", alias)
            if target is not None:  # an alias only ever names a finalized, intact version
                assert store.verify_version("m", target)["status"] == "passed"
    versions = store.versions("m")
    assert any(info.status == "passed" for info in versions)
    assert all(info.status in ("passed", "incomplete") for info in versions)
