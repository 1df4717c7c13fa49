"""Advisory locks (flock) that tell live writers from crashed ones.

A writer holds an exclusive flock for as long as it builds something (a staging folder, a
temporary file, a version folder). The kernel drops the lock when the process dies, even by
SIGKILL, so "exists but nobody holds its lock" means "left behind by a crash", which is what
lets `fsck --repair` remove orphans without ever touching a live run's files.

Every lock is taken on a lock file opened read-write: flock(2) on NFS is emulated with a
byte-range lock, and an exclusive one needs a descriptor open for writing, which a folder
never gives. The lock of a hidden entry `.P` is the file `.P.lock` beside it, that of a version
folder the file `.lock` inside it (`lock_path`).

New entries are created under their lock: `create_dir`/`create_file` first create `.P.lock`
(O_EXCL) and lock it, and only then create `.P`, so no entry is ever visible unlocked. `release`
unlinks the lock file while still holding it; whoever locks a lock file checks afterwards that
the name still leads to the inode it locked (a release or a repair may have unlinked it in
between) and starts again if not. So an unlinked lock file never protects anything.
"""

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCK_SUFFIX = ".lock"
# O_NONBLOCK: opening a FIFO someone planted at a lock file's name must fail, not hang.
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Held:
    """A held lock: the descriptor of its lock file (open read-write) and the lock file's path."""

    fd: int
    path: Path


def lock_path(path: Path) -> Path:
    """The lock file that guards the entry `path`.

    A hidden entry (a staging folder, a temporary file: what writers create under lock and then
    rename or remove) has its lock beside it, `path` plus LOCK_SUFFIX, since the lock must exist
    before the entry does and outlive its rename. A visible folder that is held while it exists
    (a version folder) has it inside, as `<folder>/.lock`, so listings of the store's folders
    show only what they list.
    """
    if path.name.startswith("."):
        return path.with_name(path.name + LOCK_SUFFIX)
    return path / LOCK_SUFFIX


def _lock(lock: Path, blocking: bool, create: int) -> Held | None:
    """Open and flock `lock` (O_RDWR); None if non-blocking and held by someone else."""
    while True:
        fd = os.open(lock, _OPEN_FLAGS | create, 0o644)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "a lock file must be a regular file", str(lock))
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            if _still_named(fd, lock):
                return Held(fd, lock)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        # Unlinked (released or repaired) before we locked it: lock whatever the name holds now,
        # or, with O_EXCL, our own fresh name again, which that unlink freed.
        os.close(fd)


def _still_named(fd: int, lock: Path) -> bool:
    try:
        named = os.lstat(lock)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def hold(path: Path, blocking: bool = True) -> Held | None:
    """Lock the existing entry `path` (a folder or a file) through its lock file; release it with `release`.

    Non-blocking, returns None when another process already holds it.
    """
    return _lock(lock_path(path), blocking, os.O_CREAT)


def create_dir(path: Path) -> Held:
    """Create the hidden folder `path` under its (new) lock: nobody ever sees it unlocked.

    Raises:
        FileExistsError: `path` or its lock file exists already (pick another name).
        OSError: the lock file or the folder cannot be created.
    """
    if not path.name.startswith("."):
        raise ValueError(f"{path.name!r}: only hidden entries are created under a lock beside them")
    held = _lock(lock_path(path), True, os.O_CREAT | os.O_EXCL)
    try:
        path.mkdir()
    except BaseException:
        release(held)
        raise
    return held


def create_file(path: Path, mode: int = 0o600) -> tuple[Held, int]:
    """Create the hidden file `path` (O_EXCL, O_RDWR) under its (new) lock; return the lock and the file's fd.

    Raises:
        FileExistsError: `path` or its lock file exists already (pick another name).
    """
    if not path.name.startswith("."):
        raise ValueError(f"{path.name!r}: only hidden entries are created under a lock beside them")
    held = _lock(lock_path(path), True, os.O_CREAT | os.O_EXCL)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except BaseException:
        release(held)
        raise
    return held, fd


def release(held: Held | None) -> None:
    """Drop a lock from `hold`/`create_*`: unlink its lock file (still holding it), then close it."""
    if held is None:
        return
    try:
        if _still_named(held.fd, held.path):
            os.unlink(held.path)
    except OSError:
        pass  # a leftover lock file is harmless: fsck reports it, repair removes it
    finally:
        os.close(held.fd)


def is_held(path: Path) -> bool:
    """Whether a live process holds the lock of the entry `path`; never creates or opens `path` itself."""
    try:
        fd = os.open(lock_path(path), _OPEN_FLAGS)
    except OSError:
        return False  # no lock file (or not a file at all): nobody can hold it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextmanager
def lock_file(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the lock file `path` (created if needed, opened read-write).

    Serialises read-modify-write cycles between processes, e.g. alias moves. Given a folder,
    it locks the file `.lock` inside it instead, since a folder cannot be opened for writing.
    The file is kept afterwards: it has a fixed name that others may be waiting on.
    """
    if path.is_dir() and not path.is_symlink():
        path = path / LOCK_SUFFIX
    fd = os.open(path, _OPEN_FLAGS | os.O_CREAT, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "a lock file must be a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
