"""fsck names the processes a killed run left behind that still hold its version, instead of calling it running."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quantgate.artifacts import open_store
from quantgate.artifacts.fsck import check_store

# A run that forks a worker (which inherits the version's lock, as DataLoader workers do), then dies by SIGKILL.
_RUN_THEN_DIE = """
import os, signal, sys, time
from quantgate.artifacts import open_store
store = open_store(sys.argv[1])
version = store.create_version("m")
with store.hold_version(version):
    child = os.fork()
    if child == 0:
        os.closerange(0, 3)  # the test reads the run's output to its end
        time.sleep(120)
        os._exit(0)
    print(child, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def left_behind(tmp_path):
    """(store root, the pid of a worker still holding v1's lock after its run was killed)."""
    root = tmp_path / "store"
    open_store(root)
    done = subprocess.run([sys.executable, "-c", _RUN_THEN_DIE, str(root)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    worker = int(done.stdout.split()[0])
    yield root, worker
    try:
        os.kill(worker, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names holders through /proc (Linux)")
def test_fsck_names_a_dead_run_s_worker_that_still_holds_its_version(left_behind):
    root, worker = left_behind
    problems = [problem for problem in check_store(open_store(root)) if problem.path == "m/versions/v1"]
    assert [problem.kind for problem in problems] == ["leftover-processes"]
    assert f"pid {worker} " in problems[0].message and f"kill {worker}" in problems[0].message
    quantgate = Path(sys.executable).parent / "quantgate"
    shown = subprocess.run([str(quantgate), "fsck", "--store", str(root)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1 and f"pid {worker} " in shown.stdout, shown.stdout + shown.stderr

    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init
    kinds = [problem.kind for problem in check_store(open_store(root)) if problem.path == "m/versions/v1"]
    assert kinds == ["incomplete-version"]  # gone: the version is plainly interrupted, as after any crash


def test_a_live_run_s_version_is_running_not_left_over(tmp_path):
    store = open_store(tmp_path / "store")
    version = store.create_version("m")
    with store.hold_version(version):
        assert [problem for problem in check_store(store) if problem.path == "m/versions/v1"] == []
