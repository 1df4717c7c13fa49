"""Small pieces of the S3 store: a writer that uploads what it committed, claims, and aliases from the log."""

import shutil

from ..audit import current_actor
from ..manifest import sealed_json, utc_now


class UploadingWriter:
    """A local StageWriter or CheckpointWriter whose committed folder is uploaded before the block ends.

    If the upload fails (the server went away, the credentials were revoked), the local copy is
    removed too, so the mirror never holds a stage the bucket does not, and the error propagates:
    nothing of the stage is visible to any reader, since its seal was never created. A worker killed
    between the two leaves a local copy nobody holds; the mirror drops it when it next follows the
    version (S3Store._follow_version).
    """

    def __init__(self, writer, upload, guard):
        # guard: held from the start to the end of the upload (the version's flock: see S3Store._writing).
        self._writer, self._upload, self._guard = writer, upload, guard

    def __getattr__(self, name):
        return getattr(self._writer, name)  # dir, metrics, ref

    def __enter__(self) -> "UploadingWriter":
        self._guard.__enter__()
        try:
            self._writer.__enter__()
        except BaseException:
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        try:
            self._writer.__exit__(exc_type, exc, traceback)  # commits locally, or cleans up and lets `exc` propagate
            if exc_type is None:
                folder = self._writer._target
                try:
                    self._upload(folder)
                except BaseException:
                    shutil.rmtree(folder, ignore_errors=True)
                    raise
        finally:
            self._guard.__exit__(None, None, None)
        return False


def claim_body(model: str, version: str) -> bytes:
    """What a version claim records: who took the number, and when."""
    return sealed_json({"model": model, "version": version, "who": current_actor(), "at": utc_now()})


def aliases_of(entries: list[dict]) -> dict[str, tuple[str, ...]]:
    """{version: the aliases pointing at it} after the audit `entries`."""
    held: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry.get("alias"), str) and isinstance(entry.get("to"), str):
            held[entry["alias"]] = entry["to"]
    by_version: dict[str, list[str]] = {}
    for alias, version in sorted(held.items()):
        by_version.setdefault(version, []).append(alias)
    return {version: tuple(names) for version, names in by_version.items()}
