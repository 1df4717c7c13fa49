"""Many processes on one store: concurrent alias moves are never lost, and SIGKILL at any moment
leaves nothing that looks complete but is not.

Every test runs against the local store (a folder) and the S3 store (a real bucket). On S3 each
writer process is a worker with its own mirror ($QUANTGATE_S3_CACHE), and the checks are made by
another worker, which shares nothing with the writers but the bucket.
"""

import os
import random
import signal
import subprocess
import sys
import time

from quantgate.artifacts import is_s3
from quantgate.artifacts.fsck import check_store, repair

_MOVE_RELEASE = """
import sys, time
from quantgate.artifacts import open_store
from quantgate.artifacts.errors import AliasMoved
spec, start_at, rounds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
store = open_store(spec)
time.sleep(max(0.0, start_at - time.time()))  # line the processes up so they really race
for _ in range(rounds):
    version = store.create_version("m")
    with store.write_stage(version, "gate", config={}, inputs={}) as writer:
        (writer.dir / "gate.json").write_text("{}")
    store.finalize_version(version, {"status": "passed"})
    while True:
        try:
            previous = store.set_alias("m", "release", version.version, reason="race")
            break
        except AliasMoved:  # S3 only (no lock): another worker's move of `release` took the number first
            continue
    print(previous or "-", version.version, flush=True)
"""


def test_concurrent_alias_moves_form_one_unbroken_chain(spec, open_worker, worker_env):
    rounds, workers = 6, 4
    open_worker("test")  # the local store's folder exists before the race
    start_at = str(time.time() + (6.0 if is_s3(spec) else 1.5))  # boto3 and the first listing take a moment
    processes = [subprocess.Popen([sys.executable, "-c", _MOVE_RELEASE, spec, start_at, str(rounds)],
                                  stdout=subprocess.PIPE, text=True, env=worker_env(f"mover-{n}"))
                 for n in range(workers)]
    moves = [line.split() for process in processes for line in process.communicate(timeout=300)[0].splitlines()]
    assert [process.returncode for process in processes] == [0] * workers
    new = [to for _, to in moves]
    previous = [before for before, _ in moves]
    assert sorted(new, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(1, rounds * workers + 1)]
    # Each move replaced exactly the target the move before it set: no lost or duplicated update.
    assert previous.count("-") == 1 and len(set(previous)) == len(previous)
    assert set(previous) - {"-"} < set(new)
    store = open_worker("checker")
    assert store.alias("m", "release") == (set(new) - set(previous)).pop()
    log = store.audit_log("m")
    assert len(log) == rounds * workers
    assert [entry["from"] for entry in log] == [None] + [entry["to"] for entry in log[:-1]]
    assert check_store(store) == []


_WRITE_FOREVER = """
import sys
from quantgate.artifacts import open_store
store = open_store(sys.argv[1])
# Files big enough that writes take long enough to be interrupted: a.bin of argv[2] KiB, b.bin of 512 KiB.
payloads = {"a.bin": bytes(range(256)) * 4 * int(sys.argv[2]), "b.bin": bytes(range(256)) * 2048}
while True:
    version = store.create_version("m")
    with store.hold_version(version):
        refs = {}
        for stage in ("train", "export", "quantize"):
            with store.write_stage(version, stage, config={}, inputs=dict(refs)) as writer:
                for name, payload in payloads.items():
                    (writer.dir / name).write_bytes(payload)
            refs[stage] = writer.ref
        store.finalize_version(version, {"status": "passed"})
        for alias in ("latest", "release", "latest"):
            store.set_alias("m", alias, version.version)
    print(version.version, flush=True)
"""

# Left by a kill, and reported by fsck: half-made local folders and files, a version that never finished,
# and (S3) the objects of a stage whose seal never arrived.
_CRASH_LEFTOVERS = {"orphan-staging", "orphan-temp", "incomplete-version", "unsealed-upload", "expired-lease"}


def test_sigkill_at_random_moments_leaves_a_consistent_store(spec, open_worker, worker_env, monkeypatch):
    rng = random.Random(5)
    open_worker("writer")
    # A version takes longer on S3 (every object is a request): the kills spread over a longer window there.
    window = (1.0, 4.0) if is_s3(spec) else (0.3, 0.9)
    # On S3, a.bin goes multipart (from 8 MiB): uploads then take a good share of each version's time, so kills
    # land in them too (between a stage's local commit and its seal in the bucket).
    kib = 9 * 1024 if is_s3(spec) else 512
    if is_s3(spec):
        # A killed run's lease stays fresh for LEASE_S: expire it at once, so fsck judges the version as another
        # worker will once the lease ran out (interrupted, its unsealed uploads removable).
        from quantgate.artifacts.s3 import checks
        from quantgate.artifacts.s3 import store as s3_store

        monkeypatch.setattr(checks, "LEASE_S", -1.0)
        monkeypatch.setattr(s3_store, "lease_expired", lambda modified, now=None: True)
    finished, seen = [], set()
    for _ in range(8):
        # The same writer machine each time (its mirror survives the kill, as a disk would), killed again.
        process = subprocess.Popen([sys.executable, "-c", _WRITE_FOREVER, spec, str(kib)], start_new_session=True,
                                   stdout=subprocess.PIPE, text=True, env=worker_env("writer"))
        time.sleep(rng.uniform(*window))
        os.killpg(process.pid, signal.SIGKILL)
        finished += process.communicate(timeout=30)[0].split()
        # The writer's own mirror after the crash, and a worker that never saw it: the kill left leftovers only.
        for name in ("writer", "checker"):
            store = open_worker(name)
            problems = check_store(store)
            assert {p.kind for p in problems} <= _CRASH_LEFTOVERS, problems
            seen |= {p.kind for p in problems}
            repair(store, problems)
            assert all(p.severity == "warning" for p in check_store(store))
            for alias in ("latest", "release"):
                target = store.alias("m", alias)
                if target is not None:  # an alias only ever names a finalized, intact version
                    assert store.verify_version("m", target)["status"] == "passed"
    versions = open_worker("last").versions("m")
    print("versions:", [(info.version, info.status) for info in versions], "; finished before a kill:", finished,
          "; fsck found:", sorted(seen))
    assert any(info.status == "passed" for info in versions)
    assert all(info.status in ("passed", "incomplete") for info in versions)
    assert {info.version for info in versions if info.status == "passed"} >= set(finished)
