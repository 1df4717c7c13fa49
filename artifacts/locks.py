"""Advisory locks (flock) that tell live writers from crashed ones.

A writer holds an exclusive flock on what it is building (a staging folder, a temporary file,
a version folder) for as long as it works on it. The kernel drops the lock when the process
dies, even by SIGKILL, so "exists but nobody holds its lock" means "left behind by a crash",
which is what lets `fsck --repair` remove orphans without ever touching a live run's files.
"""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def hold(path: Path, blocking: bool = True) -> int | None:
    """Open `path` (a folder or an existing file) and flock it exclusively; return the fd to close later.

    Non-blocking, returns None when another open file already holds the lock.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int | None) -> None:
    """Close an fd from `hold`, which drops its lock."""
    if fd is not None:
        os.close(fd)


def is_held(path: Path) -> bool:
    """Whether a live process holds the flock on `path`; False if `path` is gone."""
    try:
        fd = hold(path, blocking=False)
    except FileNotFoundError:
        return False
    release(fd)
    return fd is None


@contextmanager
def lock_file(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path`, creating the (empty) lock file if needed.

    Serialises read-modify-write cycles between processes, e.g. alias moves.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
