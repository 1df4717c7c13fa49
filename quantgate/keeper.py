"""The keeper: `python -m quantgate.keeper PID TAG` ends PID's processes once PID is gone (see lifetime.py).

It polls PID's process tree every POLL_S and remembers each descendant (by pid and start time, so a
reused pid is never mistaken for one of the run's); seldom, since a poll costs CPU time the run's latency
measurements share, and the kernel wakes it when its parent dies (PR_SET_PDEATHSIG with SIGUSR1, which only
wakes it: the parent is then re-checked, as that signal also comes when the *thread* that started the keeper
ends). When its own parent changes (PID died, however: SIGKILL, the OOM killer, a worker's cancellation, or a
normal exit), it sends SIGTERM to every remembered process still alive, to their descendants, and to every
process whose environment holds the run's TAG (lifetime.RUN_TAG_ENV: a program started too briefly before the
end for a poll to see it, then orphaned), waits up to GRACE_S, then SIGKILLs what is left, and exits. After a
normal exit there is nothing left to end, and the keeper exits at once.

A forked child (no exec) shows its parent's environment as it was at the parent's start, without the tag:
such children are the poll's, or ask the kernel themselves (lifetime.die_with_parent, DataLoader workers).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import psutil

from quantgate.lifetime import PR_SET_PDEATHSIG, RUN_TAG_ENV

POLL_S = 1.0
GRACE_S = 2.0
WAKE_UP = signal.SIGUSR1


def _descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def _key(process: psutil.Process) -> tuple[int, float] | None:
    """(pid, start time) of a process that runs; None once it exited (a zombie has exited: nothing to end)."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
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
        signal.sigtimedwait([WAKE_UP], POLL_S)
    return seen


def tagged(tag: str) -> list[psutil.Process]:
    """Every process whose environment (as exec'd) holds RUN_TAG_ENV=`tag`; those of other users are unread."""
    marker = f"{RUN_TAG_ENV}={tag}\0".encode()
    found = []
    for process in psutil.process_iter():
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as environ:
                if marker in environ.read():
                    found.append(process)
        except OSError:
            continue
    return found


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
    signal.pthread_sigmask(signal.SIG_BLOCK, [WAKE_UP])  # kept pending for sigtimedwait, never delivered
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, WAKE_UP, 0, 0, 0)
    remembered = watch(int(argv[0]))
    # A process ended now may have started another in between: a few rounds catch what the previous one missed.
    for _ in range(3):
        remembered.update({key: process for process in tagged(argv[1]) if (key := _key(process)) is not None})
        left = still_running(remembered)
        if not left:
            break
        remembered.update({key: process for process in left if (key := _key(process)) is not None})
        end(left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
