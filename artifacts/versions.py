"""Versions: allocating them, looking them up, listing them and writing their final record.

A version only ever appears by an atomic mkdir and its record, version.json, is written once;
neither is rewritten afterwards.
"""

import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import locks
from .aliases import aliases_by_version
from .cache import CACHE_DIR
from .errors import ArtifactCorrupt, ArtifactError, ArtifactExists, ArtifactNotFound, StoreNotWritable
from .layout import NEXT_VERSION_FILE, PROBE_PREFIX, VERSION_RECORD
from .manifest import (
    MANIFEST_NAME,
    fsync_dir,
    make_dir,
    read_sealed,
    sealed_json,
    sha256_bytes,
    to_json_safe,
    utc_now,
    write_new_file,
)
from .names import NAME_PATTERN, VersionInfo, VersionRef, version_number
from .paths import aliases_dir, committed_stages, model_dir, relative, version_dir, version_names, versions_dir
from .verify import REBUILD_HINT
from .writer import storage_error


def prepare_root(root: Path) -> Path:
    """Create `root` if needed and prove it writable by creating and removing a probe file."""
    try:
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"{root} exists and is not a folder")
        make_dir(root)
        # Created under its lock (never visible unlocked), so a concurrent `fsck --repair` leaves it alone.
        probe = root / f"{PROBE_PREFIX}{secrets.token_hex(6)}"
        held, fd = locks.create_file(probe)
        os.close(fd)
        probe.unlink(missing_ok=True)
        locks.release(held)
    except OSError as exc:
        raise StoreNotWritable(
            f"artifact store {root.absolute()} is not writable ({exc.strerror or exc}); "
            "pass --store DIR or set QUANTGATE_STORE to a folder you can write to"
        ) from exc
    return root.resolve()


def create_version(root: Path, model: str) -> VersionRef:
    """Allocate the next version of `model`; see ArtifactStore.create_version.

    Numbers are never reused, not even after the newest version folder was deleted by hand: the
    model's counter file (NEXT_VERSION_FILE) remembers the next free number, and it is read and
    advanced under its own lock. Each new name is flushed (fsync of its parent folder) before the
    version is handed out, so a version an alias may later name survives a power cut.
    """
    folder = versions_dir(root, model)
    try:
        make_dir(folder)
        with _counter(model_dir(root, model) / NEXT_VERSION_FILE) as (counted, advance):
            number = max(counted, max(map(version_number, version_names(root, model)), default=0) + 1)
            while True:
                try:
                    # mkdir either creates the folder or fails, so each process that gets
                    # through owns its number; a loser (a store written by older code) tries the next.
                    (folder / f"v{number}").mkdir()
                    break
                except FileExistsError:
                    number += 1
            fsync_dir(folder)
            advance(number + 1)
    except OSError as exc:
        raise StoreNotWritable(
            f"cannot create a new version of model {model!r} under {folder}: "
            f"{exc.strerror or exc}; pass --store DIR or set QUANTGATE_STORE to a writable folder"
        ) from exc
    return VersionRef(model, f"v{number}", str(folder / f"v{number}"))


@contextmanager
def _counter(path: Path) -> Iterator[tuple[int, Callable[[int], None]]]:
    """The number in the counter file `path` (0 if new or unreadable) and a function that stores the next one.

    The file is its own lock (opened read-write, as NFS needs for an exclusive flock). The number
    is written in place, padded to a fixed width, so one small write replaces it whole.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "the version counter must be a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip()
        counted = int(text) if text.isdigit() else 0  # lost or damaged: the folders still bound it

        def advance(next_number: int) -> None:
            os.pwrite(fd, f"{next_number:020d}\n".encode("ascii"), 0)
            os.fsync(fd)

        yield counted, advance
    finally:
        os.close(fd)


def find_version(root: Path, model: str, version: str) -> VersionRef:
    """The existing `version` of `model`; see ArtifactStore.version."""
    path = version_dir(root, model, version)
    if not path.is_dir():
        existing = ", ".join(version_names(root, model)) or "none"
        raise ArtifactNotFound(
            f"model {model!r} has no version {version} in store {root} (existing versions: "
            f"{existing}); pick an existing version or run the pipeline to create one"
        )
    return VersionRef(model, version, str(path))


def is_finalized(root: Path, model: str, version: str) -> bool:
    return (version_dir(root, model, version) / VERSION_RECORD).is_file()


def read_version_record(root: Path, model: str, version: str) -> dict:
    """The version's record, or {} while it is not finalized.

    Raises:
        ArtifactCorrupt: version.json is not the sealed record the store wrote.
    """
    path = version_dir(root, model, version) / VERSION_RECORD
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    return read_sealed(data, f"version record {relative(root, path)}", REBUILD_HINT)


def version_infos(root: Path, models: list[str]) -> list[VersionInfo]:
    """A VersionInfo for every version of `models`; see ArtifactStore.versions."""
    infos = []
    for name in models:
        aliases = aliases_by_version(aliases_dir(root, name), root)
        for version in version_names(root, name):
            try:
                record = read_version_record(root, name, version)
                status = record.get("status", "incomplete")
            except ArtifactCorrupt as exc:  # one damaged record must not hide the others; fsck explains
                record, status = {"error": str(exc)}, "corrupt"
            infos.append(VersionInfo(
                model=name,
                version=version,
                status=status,
                aliases=aliases.get(version, ()),
                record=record,
                stages=tuple(committed_stages(version_dir(root, name, version))),
            ))
    return infos


def model_names(root: Path) -> list[str]:
    """Names of the models that have a versions folder under `root`, sorted."""
    return sorted(
        entry.name for entry in root.iterdir()
        if NAME_PATTERN.fullmatch(entry.name) and ".." not in entry.name and versions_dir(root, entry.name).is_dir()
    )


def foreign_entries(root: Path) -> list[str]:
    """What in the existing folder `root` shows it is not a store: [] for an empty folder (made, nothing run
    yet) or one holding a model's versions or the cache; otherwise its entries (a home folder, a dataset)."""
    entries = sorted(entry.name for entry in root.iterdir() if not entry.name.startswith(PROBE_PREFIX))
    return [] if not entries or CACHE_DIR in entries or model_names(root) else entries


def finalize_version(root: Path, ref: VersionRef, record: dict) -> None:
    """Write `ref`'s version.json once; see ArtifactStore.finalize_version."""
    if not isinstance(record, dict) or not isinstance(record.get("status"), str) or not record["status"]:
        raise ArtifactError(
            f"the record for model {ref.model!r} {ref.version} needs a non-empty string 'status', "
            f"e.g. {{'status': 'released'}}; got {record!r}"
        )
    folder = version_dir(root, ref.model, ref.version)
    final = dict(to_json_safe(record, "record"))
    final.update(
        model=ref.model,
        version=ref.version,
        finalized_at=utc_now(),
        stages={
            stage: sha256_bytes((folder / stage / MANIFEST_NAME).read_bytes())
            for stage in committed_stages(folder)
        },
    )
    target = folder / VERSION_RECORD
    try:
        write_new_file(target, sealed_json(final))
    except FileExistsError as exc:
        raise ArtifactExists(
            f"model {ref.model!r} {ref.version} is already finalized ({relative(root, target)} "
            "exists) and its record is immutable; create a new version instead"
        ) from exc
    except OSError as exc:
        raise storage_error(exc, f"writing {relative(root, target)}") from exc
