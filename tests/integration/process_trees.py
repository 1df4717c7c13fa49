"""Walk a run's process tree, kill the run's process, and tell which of its processes outlived it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

LATENCY_CHILD = "quantgate.runtimes.latency"
TEMPORARY_SERVER = "uvicorn"


@dataclass(frozen=True)
class Member:
    """One process of a run's tree, as seen just before the kill."""

    pid: int
    started: float
    kind: str
    command: str

    def alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            return process.create_time() == self.started and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def kind_of(process: psutil.Process, run: psutil.Process) -> str:
    """A readable name for a member of a quantgate run's tree."""
    command = " ".join(process.cmdline())
    if TEMPORARY_SERVER in command:
        return "prefect temporary server"
    if LATENCY_CHILD in command:
        return "latency child"
    if "quantgate.keeper" in command:
        return "keeper"
    if "paddle.distributed.launch" in command:
        return "training launcher"
    if "quantgate.stages.train.distributed" in command:
        return "training rank"
    if process.cmdline() == run.cmdline():
        return "forked worker (DataLoader)"
    return "other"


def tree(run: psutil.Process) -> list[Member]:
    members = []
    for process in [run, *run.children(recursive=True)]:
        try:
            members.append(Member(process.pid, process.create_time(), "run" if process.pid == run.pid else
                                  kind_of(process, run), " ".join(process.cmdline())[:160]))
        except psutil.Error:
            continue
    return members


def wait_for(run: psutil.Process, ready: Callable[[list[Member]], bool], timeout_s: float,
             output: Callable[[], str] = lambda: "") -> list[Member]:
    """The run's tree once `ready(tree)` holds (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert run.is_running() and run.status() != psutil.STATUS_ZOMBIE, f"the run ended early:\n{output()}"
        members = tree(run)
        if ready(members):
            return members
        assert time.monotonic() < deadline, f"not ready after {timeout_s} s; tree: {members}\n{output()}"
        time.sleep(0.1)


def kill_and_survivors(run_pid: int, members: list[Member], within_s: float = 8.0) -> list[Member]:
    """SIGKILL the run's process only (as `kill -9 PID` or the OOM killer would); its other processes still
    alive after `within_s`."""
    os.kill(run_pid, signal.SIGKILL)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(member.alive() for member in members):
            return []
        time.sleep(0.2)
    return [member for member in members if member.alive()]


def end_all(members: list[Member]) -> None:
    """Clean up after a failing test: SIGKILL what is left of a tree (never a reused pid)."""
    for member in members:
        if member.alive():
            try:
                os.kill(member.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def kinds(members: list[Member]) -> list[str]:
    return sorted(member.kind for member in members)
