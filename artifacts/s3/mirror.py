"""The worker's mirror of the bucket: a local store folder that follows the bucket, and the transfers.

The bucket is the store; the mirror (`<cache>/store`) is where this worker's stages read and
write local folders. Two rules keep it honest:

- **Down, the mirror follows the bucket.** A sealed folder (a stage, a checkpoint, a cache entry:
  files plus the seal written last) is fetched whole into a staging folder and renamed into place,
  so a mirrored folder is always complete. Later reads list the bucket again and re-fetch any
  object whose ETag is not the one this worker recorded (book.py), remove files the bucket lost
  and fetch ones it gained. The local verification that follows (the manifest against its pin,
  every file against the manifest) then judges the bytes, exactly as on a local store: an object
  changed behind the store's back is refused, never trusted.
- **Up, the seal goes last.** A committed folder's files are uploaded first (multipart above
  8 MiB), then its seal is created with `If-None-Match: *`: a folder without its seal in the
  bucket is invisible to every reader, and of two writers of one seal exactly one wins.
"""

import logging
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import locks
from ..errors import ArtifactExists, ArtifactNotFound
from ..manifest import list_entries, make_dir, read_regular
from .book import EtagBook
from .objects import Listed, ObjectStore

log = logging.getLogger("quantgate.store")

# A transfer this large says so on the terminal (smaller ones are quick on any link), as `quantgate run`'s
# live progress line (quantgate.terminal shows records that carry `progress`).
_ANNOUNCE_BYTES = 64 * 1024 * 1024
_LIVE = {"progress": "store"}
# Files of one folder moved at once: small objects are latency-bound, and a stage or checkpoint has several.
TRANSFERS = 8


class Mirror:
    """Transfers between the bucket (`objects`) and the mirror rooted at `root` (a local store folder)."""

    def __init__(self, objects: ObjectStore, root: Path, book: EtagBook):
        self.objects, self.root, self.book = objects, root, book

    def local(self, key: str) -> Path:
        """The mirror path of `key` (keys spell the local store's layout)."""
        return self.root.joinpath(*key.split("/"))

    def listing(self, prefix: str) -> dict[str, Listed]:
        """{relative path: Listed} of every object under the folder `prefix`."""
        return {item.key[len(prefix) + 1:]: item for item in self.objects.list(prefix + "/")}

    # -- up -----------------------------------------------------------------------------------

    def upload_sealed(self, folder: Path, prefix: str, seal: str, label: str, copy_from: str | None = None) -> None:
        """Upload the complete local `folder` to `prefix`: every file, then `seal` created if absent.

        With `copy_from` (the prefix of a verified folder holding the same files, a reused stage's source),
        each file is copied inside the bucket instead, from the object this worker verified (its ETag).

        Raises:
            ArtifactExists: the seal is in the bucket already (another writer committed it first).
            the errors of ObjectStore (unreachable, denied): the folder stays invisible in the bucket.
        """
        files = [relpath for relpath in list_entries(folder) if relpath != seal]
        known = self.book.etags(copy_from + "/") if copy_from else {}
        uploads = [r for r in files if f"{copy_from}/{r}" not in known
                   or not self.objects.copy(f"{copy_from}/{r}", f"{prefix}/{r}", known[f"{copy_from}/{r}"])]
        total = sum((folder / relpath).stat().st_size for relpath in uploads)
        if total >= _ANNOUNCE_BYTES:
            log.info("uploading %s: %d files, %.0f MB to %s", label, len(uploads), total / 2**20,
                     self.objects.full(prefix), extra=_LIVE)
        _in_parallel(lambda relpath: self.objects.upload_file(folder / relpath, f"{prefix}/{relpath}",
                                                             progress=_Progress(label, relpath, folder / relpath)),
                     uploads)
        if not self.objects.put_new(f"{prefix}/{seal}", read_regular(folder / seal)):
            raise ArtifactExists(f"{label} is already committed in {self.objects.full(prefix)} by another writer; "
                                 "committed stages are immutable, so write this run into a new version")
        self.book.record(self.listing(prefix).values())

    def put_new(self, key: str, data: bytes) -> bool:
        """Create the small object `key` if absent (and remember it); False if it exists already."""
        if not self.objects.put_new(key, data):
            return False
        listed = self.objects.head(key)
        if listed is not None:
            self.book.record([listed])
        return True

    # -- down ---------------------------------------------------------------------------------

    def hydrate_sealed(self, prefix: str, seal: str, label: str, listed: dict[str, Listed] | None = None) -> Path:
        """Make the mirror's copy of the sealed folder at `prefix` follow the bucket; return the folder.

        Raises:
            ArtifactNotFound: the bucket holds no seal there (never committed, or an upload that never finished).
        """
        objects = self.listing(prefix) if listed is None else listed
        folder = self.local(prefix)
        if seal not in objects:
            raise ArtifactNotFound(f"{label} is not committed in {self.objects.full(prefix)} (no {seal}); "
                                   "it was never committed, or its upload did not finish")
        if folder.is_dir():
            self._follow_files(folder, prefix, objects)
        else:
            self._fetch_whole(folder, prefix, objects)
        return folder

    def follow(self, key: str, listed: Listed | None, writing: bool = False) -> Path:
        """Make the mirror's copy of the single object `key` what the bucket holds.

        A file the bucket does not hold is removed, unless `writing`: a live process of this worker holds
        its version and is between writing it here and creating it in the bucket (a version.json being
        finalized). Otherwise it is what a killed worker left: never uploaded, so never trusted.
        """
        path = self.local(key)
        if listed is None:
            if not writing or key in self.book.etags(key):
                path.unlink(missing_ok=True)
                self.book.forget(key)
        elif self.book.etags(key).get(key) != listed.etag or not path.is_file():
            self._download(listed, path)
        return path

    def _fetch_whole(self, folder: Path, prefix: str, objects: dict[str, Listed]) -> None:
        make_dir(folder.parent)
        staging = folder.parent / f".staging-fetch-{folder.name}-{uuid.uuid4().hex[:12]}"
        held = locks.create_dir(staging)  # under its lock: a concurrent fsck --repair leaves it alone
        try:
            _in_parallel(lambda pair: self.objects.download_file(pair[1].key, staging.joinpath(*pair[0].split("/"))),
                         sorted(objects.items()))
            try:
                os.rename(staging, folder)
            except OSError:
                if not folder.is_dir():
                    raise
                # Another process of this worker fetched it first: follow what it fetched.
                self._follow_files(folder, prefix, objects)
                return
            self.book.record(objects.values())
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            locks.release(held)

    def _follow_files(self, folder: Path, prefix: str, objects: dict[str, Listed]) -> None:
        known = self.book.etags(prefix + "/")
        present = set(list_entries(folder))
        for relpath in sorted(present - set(objects)):  # gone from the bucket: the mirror loses it too
            (folder / relpath).unlink(missing_ok=True)
        for relpath, item in sorted(objects.items()):
            if known.get(item.key) != item.etag or relpath not in present:
                self._download(item, folder.joinpath(*relpath.split("/")))

    def _download(self, item: Listed, path: Path) -> None:
        make_dir(path.parent)
        self.objects.download_file(item.key, path)  # to a temporary file, then replaced in one step
        self.book.record([item])

    def forget(self, prefix: str) -> None:
        """Remove the mirror's copy of the folder `prefix` and what the book says of it."""
        shutil.rmtree(self.local(prefix), ignore_errors=True)
        self.book.forget(prefix + "/")


def _in_parallel(transfer, items: list) -> None:
    """`transfer(item)` for every item, TRANSFERS at a time (boto3's client is thread-safe); the first error raises
    once every transfer started has ended, so nothing is still writing when the caller cleans up."""
    if len(items) <= 1:
        for item in items:
            transfer(item)
        return
    with ThreadPoolExecutor(min(TRANSFERS, len(items)), thread_name_prefix="s3-transfer") as pool:
        for future in [pool.submit(transfer, item) for item in items]:
            future.result()


class _Progress:
    """boto3's transfer callback for one file: a line at each quarter of a large file."""

    def __init__(self, label: str, relpath: str, path: Path):
        self.label, self.relpath = label, relpath
        self.size = path.stat().st_size
        self.done = 0
        self.shown = 0

    def __call__(self, transferred: int) -> None:
        self.done += transferred
        if self.size < _ANNOUNCE_BYTES:
            return
        quarter = 4 * self.done // self.size
        if quarter > self.shown:
            self.shown = quarter
            log.info("uploading %s: %s %d%% of %.0f MB", self.label, self.relpath, 25 * quarter, self.size / 2**20,
                     extra=_LIVE)
