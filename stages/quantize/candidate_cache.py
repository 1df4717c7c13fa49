"""What the search's producers share: content digests, the cache their calibrations are kept in between runs, and
the record each calibration folder holds.

A calibration is keyed by a digest of everything that decides it, so a trial that repeats one (in this search, or
from the cache of an earlier run) costs no calibration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from quantgate.config import QuantizeConfig, QuantizeRecipe
from quantgate.stages.quantize.ptq import QuantizationError

CALIBRATION_METRICS = "calibration.json"  # in each calibration folder: the manifest metrics of its model


class Cache(Protocol):
    """Where calibrations and rankings are kept between runs (artifacts.cache.ContentCache)."""

    def get(self, digest: str) -> Path | None: ...

    def fill(self, digest: str) -> AbstractContextManager[Path]: ...


def content_digest(*parts: object) -> str:
    """sha256 over `parts`: bytes as they are, anything else as canonical JSON."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return digest.hexdigest()


def files_digest(*paths: Path) -> str:
    """`content_digest` over the bytes of `paths`."""
    return content_digest(*(Path(path).read_bytes() for path in paths))


def recipe_record(settings: QuantizeConfig) -> dict:
    """The recipe fields of `settings`, every one set (a QuantizeRecipe built from it reproduces them)."""
    return {name: getattr(settings, name) for name in QuantizeRecipe.model_fields}


class CalibrationFolders:
    """One producer's calibrations by digest: this search's, then the cache's, else made by `run(folder)` (into the
    cache when there is one, else into `scratch`)."""

    def __init__(self, scratch: Path, cache: Cache | None):
        self.scratch, self.cache = Path(scratch), cache
        self._calibrated: dict[str, Path] = {}

    def folder(self, digest: str, run: Callable[[Path], None]) -> tuple[Path, bool]:
        """(the calibration's folder, whether it was made before).

        Raises:
            QuantizationError: the cache entry was damaged right after it was written.
        """
        if digest in self._calibrated:
            return self._calibrated[digest], True
        if self.cache is not None and (entry := self.cache.get(digest)) is not None:
            self._calibrated[digest] = entry
            return entry, True
        if self.cache is None:
            folder = self.scratch / f"calibration-{digest[:16]}"
            folder.mkdir()
            run(folder)
        else:
            with self.cache.fill(digest) as staging:
                run(staging)
            folder = self.cache.get(digest)
            if folder is None:
                raise QuantizationError(f"the calibration cached as {digest[:12]} was damaged right after it was "
                                        "written; check the store's disk and run again")
        self._calibrated[digest] = folder
        return folder, False
