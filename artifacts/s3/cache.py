"""The search cache shared through the bucket: `.cache/<kind>/<entry>/`, content-addressed, sealed last.

A miss in the worker's mirror looks in the bucket before it is a miss; a filled entry is uploaded
(its files, then cache-entry.json created if absent: when two workers fill one digest, the first
seal wins and both results are equal). The kind's bookkeeping database (`state_file`, keyed by
inode) stays on the worker: it describes this machine's files.
"""

from pathlib import Path

from ..cache import CACHE_DIR, ENTRY_MANIFEST, ContentCache
from ..errors import ArtifactError, ArtifactExists


class S3ContentCache(ContentCache):
    def __init__(self, store_root: Path, kind: str, salt: str, mirror):
        super().__init__(store_root, kind, salt)
        self._mirror = mirror
        self._kind = kind

    def _prefix(self, digest: str) -> str:
        return f"{CACHE_DIR}/{self._kind}/{self._name(digest)}"

    def get(self, digest: str) -> Path | None:
        found = super().get(digest)
        if found is not None:
            return found
        listed = self._mirror.listing(self._prefix(digest))
        if ENTRY_MANIFEST not in listed:
            return None
        try:
            self._mirror.hydrate_sealed(self._prefix(digest), ENTRY_MANIFEST, f"cache entry {self._kind}", listed)
        except ArtifactError:
            return None  # a miss: the entry is recomputed
        return super().get(digest)

    def fill(self, digest: str):
        return _UploadingFill(self, digest)


class _UploadingFill:
    """ContentCache.fill, then the committed entry uploaded (a lost race to seal it is fine: equal results)."""

    def __init__(self, cache: S3ContentCache, digest: str):
        self._cache, self._digest = cache, digest
        self._inner = ContentCache.fill(cache, digest)

    def __enter__(self) -> Path:
        return self._inner.__enter__()

    def __exit__(self, exc_type, exc, traceback) -> bool:
        suppressed = self._inner.__exit__(exc_type, exc, traceback)
        if exc_type is None:
            folder = self._cache.root / self._cache._name(self._digest)
            try:
                self._cache._mirror.upload_sealed(folder, self._cache._prefix(self._digest), ENTRY_MANIFEST,
                                                  f"cache entry {self._cache._kind}")
            except ArtifactExists:
                pass  # another worker sealed the same digest first; its files are the same result
        return suppressed
