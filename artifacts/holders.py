"""Who holds a version's lock: the run that took it, or processes it left behind when it died.

A flock belongs to an open file description, and a forked child (a DataLoader worker, a pool process)
shares its parent's. So a child that outlives a killed run keeps the run's version lock, and `fsck` would
call that version "running" for as long as the child lives. The run therefore writes its pid and start time
into the version's lock file when it takes it (`record_owner`), and `leftover_holders` names the processes
on this machine that still hold that lock although the run that took it is gone.

Linux only (/proc); elsewhere, and for processes /proc does not show us, nothing is named.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import locks

PROC = Path("/proc")


@dataclass(frozen=True)
class Holder:
    """A live process holding a lock file open."""

    pid: int
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, unique."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]  # the command may hold spaces and parentheses


def record_owner(held: locks.Held) -> None:
    """Write "<pid> <start time>" of this process into the lock file it holds (best effort)."""
    started = _start_time(os.getpid())
    if started is None:
        return
    try:
        os.ftruncate(held.fd, 0)
        os.pwrite(held.fd, f"{os.getpid()} {started}\n".encode(), 0)
    except OSError:
        pass  # an owner we cannot record only means fsck cannot name leftovers of this run


def _owner(lock: Path) -> tuple[int, str] | None:
    try:
        pid, started = lock.read_text().split()
        return int(pid), started
    except (OSError, ValueError):
        return None


def _holders_of(lock: Path) -> list[Holder]:
    """Every process whose open files include `lock` (same device and inode), this one excepted."""
    try:
        target = os.stat(lock)
    except OSError:
        return []
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            descriptors = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for descriptor in descriptors:
            try:
                opened = os.stat(descriptor)
            except OSError:
                continue
            if (opened.st_dev, opened.st_ino) == (target.st_dev, target.st_ino):
                try:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    command = "?"
                found.append(Holder(int(entry.name), command[:120]))
                break
    return found


def leftover_holders(entry: Path) -> tuple[int | None, list[Holder]]:
    """(the pid of the run that took `entry`'s lock, the processes holding that lock though that run is gone).

    Nothing is left over while the run that took the lock still runs, or when no owner was recorded.
    """
    lock = locks.lock_path(entry)
    owner = _owner(lock)
    if owner is None or _start_time(owner[0]) == owner[1]:
        return (owner[0] if owner else None), []
    return owner[0], _holders_of(lock)


def leftover_problems(root: Path, version_dir: Path) -> list:
    """fsck's finding for a version held only by processes its dead run left behind ([] while the run lives)."""
    from .fsck_entries import Problem, rel

    owner, left = leftover_holders(version_dir)
    if not left:
        return []
    pids = " ".join(str(holder.pid) for holder in left)
    return [Problem("leftover-processes", rel(root, version_dir),
                    f"the run that wrote it (pid {owner}) is gone, but {len(left)} process(es) it started still "
                    f"hold it, so it looks running: {'; '.join(holder.describe() for holder in left)}; end them "
                    f"(kill {pids}), then fsck reports the version as interrupted")]
