"""The keeper: `python -m quantgate.keeper PID` ends PID's descendants once PID is gone (see lifetime.py).

It polls PID's process tree every POLL_S and remembers each descendant (by pid and start time, so a
reused pid is never mistaken for one of the run's). When its own parent changes (PID died, however:
SIGKILL, the OOM killer, a worker's cancellation, or a normal exit), it sends SIGTERM to every remembered
process still alive and to their descendants, waits up to GRACE_S, then SIGKILLs what is left, and exits.
After a normal exit there is nothing left to end, and the keeper exits within POLL_S.

A child started and orphaned within one poll can escape it; the children we start ourselves also ask
the kernel to kill them (lifetime.die_with_parent), which has no such window.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

POLL_S = 0.2
GRACE_S = 2.0


def _descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def _key(process: psutil.Process) -> tuple[int, float] | None:
    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return None


def watch(run_pid: int) -> dict[tuple[int, float], psutil.Process]:
    """Remember `run_pid`'s descendants until it stops being our parent; return them."""
    seen: dict[tuple[int, float], psutil.Process] = {}
    try:
        run = psutil.Process(run_pid)
    except psutil.Error:
        return seen
    me = os.getpid()
    while os.getppid() == run_pid:
        for process in _descendants(run):
            key = _key(process)
            if key is not None and process.pid != me:
                seen.setdefault(key, process)
        time.sleep(POLL_S)
    return seen


def still_running(remembered: dict[tuple[int, float], psutil.Process]) -> list[psutil.Process]:
    """The remembered processes that still run (same start time), with their descendants now."""
    alive: dict[tuple[int, float], psutil.Process] = {}
    for key, process in remembered.items():
        if _key(process) != key:
            continue  # exited, or its pid now belongs to another process
        alive[key] = process
        for child in _descendants(process):
            child_key = _key(child)
            if child_key is not None:
                alive.setdefault(child_key, child)
    return [process for process in alive.values() if process.pid != os.getpid()]


def end(processes: list[psutil.Process]) -> list[psutil.Process]:
    """SIGTERM `processes`, wait up to GRACE_S, SIGKILL the rest; return those that outlived even that."""
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)  # psutil checks the start time: never a reused pid
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=GRACE_S)
    return alive


def main(argv: list[str]) -> int:
    # The run's terminal or group signals are for the run: the keeper leaves when the run is gone, not before.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    remembered = watch(int(argv[0]))
    # A process ended now may have forked in between: a few rounds catch what the previous one missed.
    for _ in range(3):
        left = still_running(remembered)
        if not left:
            break
        remembered.update({key: process for process in left if (key := _key(process)) is not None})
        end(left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
