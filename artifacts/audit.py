"""The audit log: one JSON line per alias move, appended under a lock, never rewritten.

<model>/audit.jsonl says who moved which alias of the model, when, from where to where and why.
Each line is written with one write() on an O_APPEND descriptor and fsynced, so a line is either
wholly there or absent; an exclusive flock serializes writers, so the "from" of every line is
the target the alias really had when it moved.
"""

import fcntl
import getpass
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ArtifactCorrupt


def current_actor() -> str:
    """user@host of this process; the uid when the user has no name (e.g. in a container)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


@contextmanager
def locked_log(path: Path) -> Iterator[int]:
    """An append-only descriptor of the audit log at `path`, held under an exclusive lock."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def append_line(fd: int, entry: dict) -> None:
    """Append `entry` as one JSON line in a single write, then fsync it."""
    line = (json.dumps(entry, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    written = os.write(fd, line)
    if written != len(line):  # a regular file takes the whole line or raises; be sure anyway
        raise OSError(f"short write to the audit log ({written} of {len(line)} bytes)")
    os.fsync(fd)


def read_log(path: Path, store_root: Path) -> list[dict]:
    """Every entry of the audit log at `path`, oldest first; [] when nothing was logged yet.

    Raises:
        ArtifactCorrupt: a line is not a JSON object.
    """
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            raise ArtifactCorrupt(
                f"line {number} of {path.relative_to(store_root).as_posix()} is not a valid audit entry ({exc}); "
                "the log is append-only, so move the file aside to start a new one"
            ) from exc
        entries.append(entry)
    return entries
