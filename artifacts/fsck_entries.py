"""What fsck may safely look at: folder listings that never follow a link, orphans and their lock files.

Every entry is judged by lstat: a symlink is never followed (a link named like a staging folder
could otherwise lead `--repair` into a real folder elsewhere), and a FIFO, socket or device is
never opened (opening a FIFO blocks until someone writes to it). Such entries are named as
`special-file` errors; fsck never removes them, since the store never makes them.

An orphan is something a writer creates under its lock (locks.create_dir/create_file: a
staging folder, a temporary file, a cache entry set aside) that nobody holds any more. Its lock
file `<name>.lock` belongs to it; a lock file left without its entry (a crash between the two
unlinks of a clean-up) is an orphan of its own. Lock files with fixed names (`aliases/.lock`,
the version counter) and a version folder's own `.lock` are never reported.
"""

import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from . import locks
from .cache import DAMAGED_PREFIX
from .layout import PROBE_PREFIX
from .manifest import TEMP_SUFFIX, entry_kind
from .writer import STAGING_PREFIX


@dataclass(frozen=True)
class Problem:
    """One finding; `path` is relative to the store root."""

    kind: str
    path: str
    message: str
    severity: str = "error"  # or "warning"
    repairable: bool = False

    def describe(self) -> str:
        return f"{self.severity:<7} {self.kind:<18} {self.path}: {self.message}"


@dataclass(frozen=True)
class Entry:
    """One folder entry as lstat sees it."""

    path: Path
    mode: int

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def is_special(self) -> bool:
        return not (self.is_dir or self.is_file)


def scan(folder: Path) -> list[Entry]:
    """The entries of `folder`, sorted by name, each with its lstat mode; [] if the folder is gone."""
    try:
        with os.scandir(folder) as found:
            entries = []
            for item in found:
                try:
                    entries.append(Entry(Path(item.path), item.stat(follow_symlinks=False).st_mode))
                except FileNotFoundError:
                    continue  # removed while we listed (a writer finishing)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(entries, key=lambda entry: entry.name)


def lstat_mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def special(root: Path, entry: Entry) -> Problem:
    """The error for a symlink, FIFO, socket or device where the store keeps plain files and folders."""
    return Problem("special-file", rel(root, entry.path),
                   f"{entry_kind(entry.mode)} where the store keeps only plain files and folders; fsck neither "
                   "follows nor opens it and --repair leaves it: remove it by hand (`rm` on a link leaves its "
                   "target alone)")


def is_orphan_name(name: str) -> bool:
    """Whether `name` is something a writer creates under its lock (and so a crash may leave behind)."""
    return (name.startswith((STAGING_PREFIX, DAMAGED_PREFIX, PROBE_PREFIX))
            or (name.startswith(".") and name.endswith(TEMP_SUFFIX)))


def owner_of_lock(entry: Entry) -> str | None:
    """The name of the entry a lock file guards, or None if `entry` is no lock file."""
    if entry.is_file and entry.name.endswith(locks.LOCK_SUFFIX):
        return entry.name[:-len(locks.LOCK_SUFFIX)]
    return None


def split_lock_files(root: Path, entries: list[Entry]) -> tuple[list[Entry], list[Problem]]:
    """`entries` without lock files, and the orphaned lock files among them (reported once, repairable)."""
    names = {entry.name for entry in entries}
    kept, problems = [], []
    for entry in entries:
        owner = owner_of_lock(entry)
        if owner is None:
            kept.append(entry)
        elif owner not in names and is_orphan_name(owner):
            problems += orphan(root, entry.path.with_name(owner), "orphan-temp", shown=entry.path)
        # else: the lock of an entry that is there (judged with it), or a fixed-name lock file
    return kept, problems


def orphan(root: Path, path: Path, kind: str, shown: Path | None = None) -> list[Problem]:
    """An orphan problem for the entry `path` unless a live process holds its lock."""
    if locks.is_held(path):
        return []  # a live process is writing it
    return [Problem(kind, rel(root, shown or path), "left behind by an interrupted run; `fsck --repair` removes it",
                    repairable=True)]


def remove_orphan(path: Path) -> bool:
    """Remove the orphan `path` (a real folder or file; for a lock file, just it) while holding its lock.

    Never follows a link: a symlink or special file found at `path` is left alone. Returns
    whether anything was removed; False when a live process holds it or it is gone.
    """
    is_lock = path.name.endswith(locks.LOCK_SUFFIX) and path.name != locks.LOCK_SUFFIX
    owner = path.with_name(path.name[:-len(locks.LOCK_SUFFIX)]) if is_lock else path
    try:
        held = locks.hold(owner, blocking=False)
    except OSError:
        return False  # its lock file is not a plain file (forged): leave both to the user
    if held is None:
        return False  # a live process picked it up
    try:
        mode = lstat_mode(owner)
        if mode is not None and stat.S_ISDIR(mode):
            shutil.rmtree(owner)  # rmtree itself never follows links inside the tree
        elif mode is not None and stat.S_ISREG(mode):
            owner.unlink()
        elif mode is not None:
            return False  # it became a link or a FIFO in the meantime: not ours to remove
        return mode is not None or owner != path
    finally:
        locks.release(held)  # unlinks the lock file too


def check_cache(root: Path) -> list[Problem]:
    """The content cache (<store>/.cache/<kind>/<digest>/): orphans, damaged entries and strays."""
    from .cache import CACHE_DIR, ENTRY_MANIFEST, STATE_FILES
    from .manifest import read_regular, sha256_file

    problems = []
    for kind_dir in scan(root / CACHE_DIR):
        if not kind_dir.is_dir:
            problems.append(special(root, kind_dir) if kind_dir.is_special else
                            Problem("unexpected-entry", rel(root, kind_dir), "not a cache kind's folder"))
            continue
        entries, problems_here = split_lock_files(root, scan(kind_dir.path))
        problems += problems_here
        for entry in entries:
            if entry.is_special:
                problems.append(special(root, entry))
            elif entry.name in STATE_FILES and not entry.is_dir:
                continue  # a kind's rebuildable bookkeeping (ContentCache.state_file)
            elif entry.name.startswith(STAGING_PREFIX) and entry.is_dir:
                problems += orphan(root, entry.path, "orphan-staging")
            elif entry.name.startswith(DAMAGED_PREFIX) and entry.is_dir:
                problems.append(Problem("orphan-cache", rel(root, entry.path),
                                        "a damaged cache entry a run set aside; `fsck --repair` removes it",
                                        repairable=True))
            elif entry.is_dir and not entry.name.startswith("."):
                try:
                    recorded = json.loads(read_regular(entry.path / ENTRY_MANIFEST))["files"]
                    # sha256_file refuses links and FIFOs (OSError), so nothing here follows or blocks.
                    bad = sorted(name for name, sha in recorded.items() if sha256_file(entry.path / name)[0] != sha)
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    bad = [f"{ENTRY_MANIFEST} or a file it lists ({getattr(exc, 'strerror', None) or exc})"]
                if bad:
                    problems.append(Problem("corrupt-cache-entry", rel(root, entry.path),
                                            f"{', '.join(bad)} does not match the entry's record; the next run "
                                            "would recompute it, `fsck --repair` removes it", repairable=True))
            else:
                problems.append(Problem("unexpected-entry", rel(root, entry.path), "not a cache entry"))
    return problems
