"""What this worker knows of the bucket: the ETag of every object it uploaded or downloaded and verified.

Objects of the store are immutable once written, so an object whose ETag is no longer the one
recorded here was changed behind the store's back (by hand, by a forger, by another program).
Every read of a mirrored folder compares the bucket's listing with this book before it trusts
the local copy (see mirror.py). The book is per worker, like the mirror it describes: an SQLite
file next to it, shared safely by the worker's own processes.
"""

import sqlite3
from contextlib import closing
from pathlib import Path

_SCHEMA = "CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, etag TEXT NOT NULL, size INTEGER NOT NULL)"


class EtagBook:
    """key -> (etag, size) of the objects this worker has seen and verified, in `path` (SQLite)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def etags(self, prefix: str) -> dict[str, str]:
        """{key: etag} of every recorded key under `prefix` (a folder prefix ending in "/", or a key)."""
        upper = prefix + "\U0010ffff"
        with closing(self._connect()) as db:
            rows = db.execute("SELECT key, etag FROM objects WHERE key >= ? AND key < ?", (prefix, upper))
            return dict(rows.fetchall())

    def record(self, entries) -> None:
        """Remember each Listed (key, size, etag) in `entries` as seen and verified."""
        rows = [(entry.key, entry.etag, entry.size) for entry in entries]
        if rows:
            with closing(self._connect()) as db, db:
                db.executemany("INSERT OR REPLACE INTO objects (key, etag, size) VALUES (?, ?, ?)", rows)

    def forget(self, prefix: str) -> None:
        """Drop every record under `prefix` (a folder prefix, or one key)."""
        with closing(self._connect()) as db, db:
            db.execute("DELETE FROM objects WHERE key >= ? AND key < ?", (prefix, prefix + "\U0010ffff"))
