"""quantgate.lifetime and the keeper: what a process starts ends with it, however it ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc: Linux")

# A parent that starts children as the pipeline does, prints "<pid> <start time>" of each, then dies by SIGKILL.
_PARENT = """
import os, signal, subprocess, sys, time
import psutil
from quantgate.lifetime import dies_with_us, keep_children
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
mode = sys.argv[1]
if mode == "keeper":
    keep_children()
    children = [subprocess.Popen(["sleep", "60"], **quiet),
                subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True, **quiet)]
else:
    children = [subprocess.Popen(dies_with_us(["sleep", "60"]), **quiet)]
time.sleep(1.0)  # the wrapper has exec'd, the keeper has seen every child
for child in children:
    for process in [psutil.Process(child.pid), *psutil.Process(child.pid).children(recursive=True)]:
        print(process.pid, process.create_time(), flush=True)
if mode == "exit":
    sys.exit(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


def started_then_parent_died(mode: str) -> list[tuple[int, float]]:
    done = subprocess.run([sys.executable, "-c", _PARENT, mode], capture_output=True, text=True, timeout=60)
    assert done.stdout, done.stderr
    return [(int(pid), float(started)) for pid, started in (line.split() for line in done.stdout.splitlines())]


def alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def left_after(processes: list[tuple[int, float]], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(alive(*process) for process in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid, started in processes if alive(pid, started)]
    for pid in left:
        psutil.Process(pid).kill()
    return left


def test_a_command_started_through_dies_with_us_dies_with_the_killed_parent():
    processes = started_then_parent_died("kill")
    assert len(processes) == 1
    assert left_after(processes, 1.0) == []  # the kernel's signal: no polling delay


def test_the_keeper_ends_children_and_grandchildren_of_a_killed_run():
    # `sleep 60` knows nothing of the run; the second child is in a session of its own with a child of its own.
    processes = started_then_parent_died("keeper")
    assert len(processes) == 4
    assert left_after(processes, 5.0) == []


def test_the_keeper_leaves_with_a_run_that_ends_normally():
    done = subprocess.run([sys.executable, "-c",
                           "from quantgate import lifetime; lifetime.keep_children(); print(lifetime._keeper.pid)"],
                          capture_output=True, text=True, timeout=60)
    keeper = psutil.Process(int(done.stdout))
    keeper.wait(5)  # raises TimeoutExpired if it stays


def test_the_keeper_is_started_once_per_process():
    script = ("from quantgate import lifetime; lifetime.keep_children(); first = lifetime._keeper; "
              "lifetime.keep_children(); print(first is lifetime._keeper)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr


def test_a_dataloader_worker_dies_with_the_process_that_forked_it(tmp_path):
    # Paddle's DataLoader calls worker_init_fn in each forked worker; a plain fork stands in for it here.
    script = """
import os, signal, sys, time
from quantgate.lifetime import DataLoaderWorkerInit
init = DataLoaderWorkerInit()
worker = os.fork()
if worker == 0:
    os.closerange(0, 3)
    init(0)
    time.sleep(60)
    os._exit(0)
time.sleep(0.5)
import psutil
print(worker, psutil.Process(worker).create_time(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid, started = done.stdout.split()
    assert left_after([(int(pid), float(started))], 1.0) == []


def test_the_wrapper_becomes_the_command_it_wraps():
    listing = "import sys; print(sorted(m for m in sys.modules if m.startswith('quantgate')))"
    done = subprocess.run([sys.executable, "-m", "quantgate.lifetime", str(os.getpid()), sys.executable, "-c", listing],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # exec'd: the command's own interpreter, nothing carried over


def test_the_keeper_ends_a_program_the_run_started_and_orphaned_between_two_polls():
    # The shell exits at once, so its `sleep` is reparented before any poll could see it in the run's tree;
    # the run's tag in its environment still names it.
    script = """
import os, signal, subprocess
import psutil
from quantgate.lifetime import keep_children
keep_children()
orphan = int(subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout)
print(orphan, psutil.Process(orphan).create_time(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid, started = done.stdout.split()
    assert left_after([(int(pid), float(started))], 5.0) == []
