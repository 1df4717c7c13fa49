"""Hash and check image files in parallel, remembering what was already hashed.

Like DVC's state database: a file's sha256 (and whether it decodes) is kept in SQLite keyed by
(path, size, mtime_ns, inode). A rescan of an unchanged folder only stats each file and looks it
up; a file whose size, mtime or inode changed is read again. The database is rebuildable
bookkeeping, never evidence: the data stage records each file's size, mtime and sha256 in its
file table, and reading checks the file against that table.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from quantgate.progress import Progress

log = logging.getLogger(__name__)

SCHEMA = """CREATE TABLE IF NOT EXISTS file_state (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,
    inode INTEGER, sha256 TEXT, problem TEXT, width INTEGER, height INTEGER)"""
DECODE_ERRORS = (OSError, SyntaxError, ValueError, UnidentifiedImageError, Image.DecompressionBombError)


@dataclass(frozen=True)
class FileFacts:
    """What one scan learnt about a file: its identity on disk, its content hash and whether it is an image."""

    size: int
    mtime_ns: int
    inode: int
    sha256: str
    problem: str | None  # why the image cannot be used (corrupt, truncated, not an image); None when it can
    width: int = 0
    height: int = 0


def _check_image(data: bytes) -> tuple[str | None, int, int]:
    """Why these bytes are not a usable image (None if they are), and the image's width and height.
    `verify` checks the structure (PNG chunk CRCs and the like) without decoding pixels; a header-only
    read would pass a truncated file."""
    buffer = io.BytesIO(data)
    try:
        with Image.open(buffer) as image:
            size = image.size
            image.verify()
        return None, *size
    except DECODE_ERRORS as exc:
        # PIL names the buffer by its memory address ("cannot identify image file <_io.BytesIO object at 0x..>"):
        # left in, the same bytes would give another problem, and another data-stage digest, in every process
        message = str(exc).replace(f" {buffer!r}", "").replace(repr(buffer), "")
        return (f"{type(exc).__name__}: {message}" if message else type(exc).__name__), 0, 0


def read_facts(path: str | Path) -> FileFacts:
    """Hash and check one file, from one open handle, so the size, mtime and bytes belong together.

    Raises:
        OSError: the file cannot be read; or it changed while it was read (its stat differs after).
    """
    with open(path, "rb") as handle:
        before = os.fstat(handle.fileno())
        data = handle.read()
        after = os.fstat(handle.fileno())
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        raise OSError(f"{path} changed while it was read; scan again once nothing writes to the folder")
    return FileFacts(after.st_size, after.st_mtime_ns, after.st_ino, hashlib.sha256(data).hexdigest(),
                     *_check_image(data))


class HashState:
    """The SQLite state database (path, size, mtime_ns, inode) -> sha256, problem; None keeps nothing."""

    def __init__(self, database: Path | None):
        self.database = database

    def known(self, stats: dict[str, os.stat_result]) -> dict[str, FileFacts]:
        """The remembered facts of every file in `stats` whose size, mtime and inode still match."""
        if self.database is None or not stats:
            return {}
        found = {}
        with closing(self._connect()) as db:
            for path, size, mtime_ns, inode, *rest in db.execute("SELECT * FROM file_state"):
                stat = stats.get(path)
                if stat is not None and (stat.st_size, stat.st_mtime_ns, stat.st_ino) == (size, mtime_ns, inode):
                    found[path] = FileFacts(size, mtime_ns, inode, *rest)
        return found

    def remember(self, facts: dict[str, FileFacts]) -> None:
        if self.database is None or not facts:
            return
        with closing(self._connect()) as db, db:
            db.executemany("INSERT OR REPLACE INTO file_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(path, f.size, f.mtime_ns, f.inode, f.sha256, f.problem, f.width, f.height)
                            for path, f in facts.items()])

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.database, timeout=60)  # two runs scanning at once wait for each other
        db.execute(SCHEMA)
        return db


def scan_files(paths: list[str], state: HashState, workers: int) -> dict[str, FileFacts]:
    """Facts of every file in `paths`: remembered ones from `state`, the rest hashed and checked by
    `workers` threads (hashlib and PIL release the GIL while they work).

    Raises:
        OSError: a file vanished or cannot be read (the caller names it).
    """
    stats = {str(path): os.stat(path) for path in paths}
    known = state.known(stats)
    todo = [path for path in paths if str(path) not in known]
    if todo:
        log.info("data: hashing and checking %d of %d files (%d unchanged since the last scan)",
                 len(todo), len(paths), len(known))
    fresh: dict[str, FileFacts] = {}
    progress = Progress(log, "data scan, file", len(todo), every_s=5.0)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for done, (path, facts) in enumerate(zip(todo, pool.map(read_facts, todo)), start=1):
            fresh[str(path)] = facts
            progress.step(done)
    state.remember(fresh)
    return {path: known.get(str(path)) or fresh[str(path)] for path in paths}
