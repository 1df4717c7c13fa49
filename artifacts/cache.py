"""A content-addressed cache next to the versions: results that are expensive to recompute and are
decided entirely by their inputs (PaddleSlim calibrations, layer-sensitivity rankings).

An entry is a folder named by the digest of everything that decides it. It is written in a private
staging folder and renamed into place, with a sha256 manifest of its files; a read re-hashes the
files and treats a mismatch as a miss (the entry is set aside, never used). Entries are never
overwritten: when two runs fill the same digest, the first rename wins and both results are equal.
Versions never point into the cache; a stage that uses an entry copies what it keeps.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import locks
from .manifest import fsync_dir, make_dir, read_regular, sha256_file
from .writer import STAGING_PREFIX, close_staging

CACHE_DIR = ".cache"  # a dot: never a model name, so listings and fsck pass it by
ENTRY_MANIFEST = "cache-entry.json"
# A damaged entry is renamed to this prefix by `get`; fsck reports such folders and --repair removes them.
DAMAGED_PREFIX = ".damaged-"
# A kind's own bookkeeping next to its entries (e.g. the file-hash state of the data stage): an SQLite
# database a reader may rebuild at any time, so fsck accepts it (and its journal) without checking it.
STATE_FILE = ".state.sqlite"
STATE_FILES = (STATE_FILE, f"{STATE_FILE}-journal")


class ContentCache:
    """One kind of cached result (e.g. "ptq-calibration") under `<store>/.cache/<kind>/<digest>/`.

    `salt` (e.g. the code version of what computes the entries) goes into every entry's name: entries
    filled under another salt are never returned.
    """

    def __init__(self, store_root: str | os.PathLike, kind: str, salt: str = ""):
        self.root = Path(store_root) / CACHE_DIR / kind
        self.salt = salt

    def _name(self, digest: str) -> str:
        return hashlib.sha256(f"{self.salt}\n{digest}".encode()).hexdigest() if self.salt else digest

    def state_file(self) -> Path:
        """The kind's bookkeeping database (STATE_FILE), its folder created; what is in it is the kind's business."""
        make_dir(self.root)
        return self.root / STATE_FILE

    def get(self, digest: str) -> Path | None:
        """The entry's folder if it exists and its files hash as recorded; otherwise None."""
        digest = self._name(digest)
        entry = self.root / digest
        try:
            recorded = json.loads(read_regular(entry / ENTRY_MANIFEST))["files"]
            if all(sha256_file(entry / name)[0] == sha for name, sha in recorded.items()):
                return entry
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if os.path.lexists(entry):  # damaged or half-removed: keep it out of the way, for inspection
            try:
                entry.rename(entry.with_name(f"{DAMAGED_PREFIX}{digest}-{uuid.uuid4().hex[:8]}"))
            except FileNotFoundError:
                pass  # another reader set it aside first
        return None

    @contextmanager
    def fill(self, digest: str) -> Iterator[Path]:
        """A staging folder to write the entry into; committed when the block ends without error."""
        digest = self._name(digest)
        make_dir(self.root)
        while True:
            staging = self.root / f"{STAGING_PREFIX}{digest[:16]}-{uuid.uuid4().hex[:8]}"
            try:
                # Created under its lock: fsck --repair removes only staging folders nobody holds.
                held = locks.create_dir(staging)
                break
            except FileExistsError:
                continue

        def commit() -> None:
            files = {path.relative_to(staging).as_posix(): sha256_file(path, fsync=True)[0]
                     for path in sorted(staging.rglob("*")) if path.is_file()}
            with open(staging / ENTRY_MANIFEST, "x") as manifest:
                manifest.write(json.dumps({"files": files}, sort_keys=True, indent=2) + "\n")
                manifest.flush()
                os.fsync(manifest.fileno())
            fsync_dir(staging)
            try:
                staging.rename(self.root / digest)
            except OSError:
                if not (self.root / digest).exists():
                    raise
                shutil.rmtree(staging, ignore_errors=True)  # someone else filled it first: theirs stands
            fsync_dir(self.root)

        failure: BaseException | None = None
        try:
            yield staging
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                close_staging(staging, f"cache entry {self.root.name}/{digest[:12]}", commit, failure)
            finally:
                locks.release(held)
