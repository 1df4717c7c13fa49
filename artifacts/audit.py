"""The audit log: one JSON line per alias move, appended under the alias lock, and the moves' commit point.

<model>/audit.jsonl says who moved which alias of the model, when, from where to where and why.
An alias move is committed when its line is in the log: the line is written (all of it, ending
in a newline) and fsynced *before* the alias file is replaced (see releases.py), so a move that
was interrupted between the two steps is found and finished from the log (see aliases.py).

A line without its trailing newline at the end of the file was torn by a full disk or a
file-size limit mid-write: it was never committed, so readers ignore it and the next move (or
`truncate_torn_tail`, which `quantgate fsck --repair` calls) cuts it off. Every writer holds the
model's alias lock (`alias_lock`), so the "from" of each line is the target the alias really had.
"""

import getpass
import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import locks
from .errors import ArtifactCorrupt
from .layout import ALIASES_DIR
from .manifest import fsync_dir, make_dir, write_all

# <model>/aliases/.lock: held while an alias and the audit log are read, decided on and written.
LOCK_NAME = ".lock"

# (lock path, thread) pairs this process holds: a flock taken twice by one process through two
# descriptors would wait for itself, so code already inside the lock does not take it again.
_held: set[tuple[str, int]] = set()


def current_actor() -> str:
    """user@host of this process; the uid when the user has no name (e.g. in a container)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


@contextmanager
def alias_lock(model_dir: Path) -> Iterator[None]:
    """Hold the model's alias lock (re-entrant within one thread); creates the aliases folder.

    Raises:
        OSError: the folder or the lock file cannot be created (e.g. a read-only store).
    """
    folder = model_dir / ALIASES_DIR
    make_dir(folder)
    key = (str(folder / LOCK_NAME), threading.get_ident())
    if key in _held:
        yield
        return
    with locks.lock_file(folder / LOCK_NAME):
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)


def holds_alias_lock(model_dir: Path) -> bool:
    """Whether this thread is inside `alias_lock` of the model."""
    return (str(model_dir / ALIASES_DIR / LOCK_NAME), threading.get_ident()) in _held


def append_line(path: Path, entry: dict) -> int:
    """Append `entry` as one JSON line and fsync it; return the offset where it starts. Hold the alias lock.

    On any failure the file is cut back to that offset, so a half-written line never stays.

    Raises:
        OSError: the line could not be written whole (ENOSPC, EFBIG, ...); the log is as before.
    """
    line = (json.dumps(entry, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if created:
            fsync_dir(path.parent)  # the log's name must survive a power cut as well as its lines
        start = os.fstat(fd).st_size
        try:
            write_all(fd, line)
            os.fsync(fd)
        except BaseException:
            _cut(fd, start)
            raise
    finally:
        os.close(fd)
    return start


def remove_line(path: Path, start: int) -> None:
    """Cut the log back to `start`, undoing the line `append_line` wrote there. Hold the alias lock.

    Raises:
        OSError: the log could not be truncated.
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, start)
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut(fd: int, start: int) -> None:
    try:
        os.ftruncate(fd, start)  # shrinking needs no space, so this works on a full disk too
        os.fsync(fd)
    except OSError:
        pass  # what is left is a torn tail without a newline, which readers ignore and the next move cuts


def torn_tail(path: Path) -> int | None:
    """The byte offset where an uncommitted (torn) last line starts, or None if the log ends cleanly."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    return data.rfind(b"\n") + 1


def truncate_torn_tail(path: Path) -> int | None:
    """Cut off a torn last line under the alias lock; return the offset cut at, or None if there was none.

    The audit log's model folder is `path.parent`. Safe next to live writers: they hold the same lock.

    Raises:
        OSError: the lock or the log cannot be written.
    """
    with alias_lock(path.parent):
        start = torn_tail(path)
        if start is not None:
            remove_line(path, start)
        return start


def read_log(path: Path, store_root: Path) -> list[dict]:
    """Every committed entry of the audit log at `path`, oldest first; [] when nothing was logged yet.

    A torn last line (no trailing newline) was never committed and is left out.

    Raises:
        ArtifactCorrupt: a committed line is not a JSON object.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data[:data.rfind(b"\n") + 1].splitlines()
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
