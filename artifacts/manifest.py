"""How the store turns things into bytes on disk: canonical JSON, digests and atomic writes.

Manifests and records are canonical JSON (sorted keys, fixed indent, no NaN) so the same
content always hashes to the same digest. Files are written under a temporary name in their
target folder and renamed into place, so a reader sees either nothing or the whole file.
"""

import errno
import hashlib
import importlib.metadata
import json
import math
import os
import secrets
import stat
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from . import locks
from .errors import ArtifactCorrupt, ArtifactError

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
# The libraries whose versions decide whether a stage's output can be reproduced.
TRACKED_LIBRARIES = (
    "paddlepaddle",
    "paddleslim",
    "paddle2onnx",
    "onnx",
    "onnxruntime",
    "prefect",
    "numpy",
    "scikit-learn",
    "quantgate",
)
# Every record the store writes carries the sha256 of its own canonical body under this key,
# so one flipped byte in a manifest, version record or alias file is detected on read.
SEAL_KEY = "record_sha256"
_CHUNK_BYTES = 1 << 20


def recorded_config(folder: Path) -> dict | None:
    """The config a stage folder's manifest records (`None` for a folder outside a store, or no readable manifest).

    For readers of a stage's folder that need what the run recorded beside it (the data stage's READ_FROM roots)
    without knowing the store's file names."""
    try:
        config = json.loads((Path(folder) / MANIFEST_NAME).read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return config if isinstance(config, dict) else None


def utc_now() -> str:
    """The current time as ISO-8601 in UTC, e.g. "2025-01-31T12:00:00.123+00:00"."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def to_json_safe(value: object, where: str) -> object:
    """A copy of `value` that strict JSON can hold; NaN and infinities become None.

    Raises:
        ArtifactError: `value` holds something JSON cannot represent; the message names where.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        # NaN is not JSON; null keeps the manifest readable by every JSON parser.
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        safe = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArtifactError(
                    f"{where} has key {key!r} of type {type(key).__name__}; JSON keys must be strings, "
                    f"so use str(key)"
                )
            safe[key] = to_json_safe(item, f"{where}[{key!r}]")
        return safe
    if isinstance(value, (list, tuple)):
        return [to_json_safe(item, f"{where}[{index}]") for index, item in enumerate(value)]
    # numpy and paddle scalars are not floats, but their .item() is.
    to_plain = getattr(value, "item", None)
    if callable(to_plain):
        try:
            plain = to_plain()
        except (TypeError, ValueError):
            plain = value
        if plain is None or isinstance(plain, (bool, int, float, str)):
            return to_json_safe(plain, where)
    raise ArtifactError(
        f"{where} is a {type(value).__name__}, which JSON cannot hold; "
        "convert it to a number, string, bool, list or dict (e.g. float(x) or x.tolist())"
    )


def canonical_json(value: object) -> bytes:
    """Sorted, indented, strict JSON with a trailing newline: equal content, equal bytes."""
    text = json.dumps(value, sort_keys=True, indent=2, allow_nan=False)
    return (text + "\n").encode("utf-8")


def sealed_json(record: dict) -> bytes:
    """canonical_json of `record` plus SEAL_KEY: the sha256 of the canonical record without it."""
    body = {key: value for key, value in record.items() if key != SEAL_KEY}
    return canonical_json({**body, SEAL_KEY: sha256_bytes(canonical_json(body))})


def read_sealed(data: bytes, where: str, hint: str) -> dict:
    """Parse a record written by `sealed_json` and prove it is byte for byte what was written.

    Raises:
        ArtifactCorrupt: not a JSON object, not in canonical form, or its seal does not match;
            the message names `where` and ends with `hint`.
    """
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise ArtifactCorrupt(f"{where} is not valid JSON ({exc}); {hint}") from exc
    if not isinstance(record, dict):
        raise ArtifactCorrupt(f"{where} holds a {type(record).__name__}, not a JSON object; {hint}")
    try:
        canonical = canonical_json(record)
    except ValueError as exc:  # NaN or Infinity smuggled in
        raise ArtifactCorrupt(f"{where} holds a value strict JSON refuses ({exc}); {hint}") from exc
    if canonical != data:
        raise ArtifactCorrupt(f"{where} changed after it was written (its bytes are not the canonical JSON "
                              f"the store writes); {hint}")
    # Records written before sealing existed carry no seal; the canonical check above still holds.
    if SEAL_KEY in record:
        body = {key: value for key, value in record.items() if key != SEAL_KEY}
        actual = sha256_bytes(canonical_json(body))
        if actual != record[SEAL_KEY]:
            raise ArtifactCorrupt(f"{where} changed after it was written: its content hashes to sha256 {actual}, "
                                  f"its seal says {record[SEAL_KEY]}; {hint}")
    return record


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, fsync: bool = False) -> tuple[str, int]:
    """Hex sha256 and size in bytes of the regular file at `path`, read in chunks.

    With `fsync`, the file is also flushed to disk, which lets one read both hash and
    persist a file that a stage wrote without syncing.

    Raises:
        OSError: `path` is a symlink (ELOOP) or not a regular file (EINVAL): never followed or opened.
    """
    digest = hashlib.sha256()
    size = 0
    fd = open_regular(path)
    with open(fd, "rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
        if fsync:
            os.fsync(file.fileno())
    return digest.hexdigest(), size


def open_regular(path: Path) -> int:
    """A read-only fd of the regular file `path`, never through a symlink and never blocking.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer; the fstat
    then refuses it, so a planted FIFO, socket or device is never read.

    Raises:
        OSError: ELOOP for a symlink, EINVAL for anything but a regular file, or the open's error.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({entry_kind(os.fstat(fd).st_mode)})", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file `path`; see open_regular for what is refused."""
    with open(open_regular(path), "rb") as file:
        return file.read()


def entry_kind(mode: int) -> str:
    """What a st_mode (from lstat) is, in words: "a regular file", "a folder", "a symlink", "a FIFO", ..."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"),
                        (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                        (stat.S_ISBLK, "a device")):
        if test(mode):
            return words
    return "not a regular file"


def list_entries(folder: Path) -> list[str]:
    """Posix paths, relative to `folder`, of every non-folder entry below it, sorted.

    Symlinks are listed (never followed), so callers can refuse them.
    """
    entries = []
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        linked_dirs = [name for name in dirnames if (here / name).is_symlink()]
        for name in filenames + linked_dirs:
            entries.append((here / name).relative_to(folder).as_posix())
    return sorted(entries)


@lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """Installed versions of TRACKED_LIBRARIES; "not installed" for those that are absent."""
    versions = {}
    for dist in TRACKED_LIBRARIES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def make_read_only(path: Path) -> None:
    """Drop the write bits of `path`, so committed files resist accidental edits."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    os.chmod(path, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: a file-size limit hit part-way gives a short write first, then EFBIG (an OSError)."""
    remaining = memoryview(data)
    while remaining:
        remaining = remaining[os.write(fd, remaining):]


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries, so a create, rename or unlink in it survives a power cut.

    Every folder the store creates, renames into or appends a new file to is flushed through
    here (the file's own fsync does not persist its name).
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir(path: Path) -> bool:
    """Create the folder `path` if missing (parents too) and flush each new name; whether it was created."""
    if path.is_dir():
        return False
    if not path.parent.is_dir():
        make_dir(path.parent)
    try:
        path.mkdir()
    except FileExistsError:
        return False  # a concurrent process made it (and flushes it)
    fsync_dir(path.parent)
    return True


TEMP_SUFFIX = ".tmp"


def _write_temp(target: Path, data: bytes, mode: int) -> tuple[Path, "locks.Held"]:
    """A flushed temporary copy of `data` next to `target`, and the lock that guards it.

    The temporary file is created under its lock (locks.create_file), held until the caller
    publishes the file: fsck calls a temporary file nobody holds a crash's leftover.
    """
    # Same folder as the target: a rename is only atomic within one filesystem.
    while True:
        temp = target.parent / f".{target.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
        try:
            held, fd = locks.create_file(temp)
            break
        except FileExistsError:
            continue  # another writer drew the same name: draw again
    try:
        with open(fd, "wb", closefd=False) as file:
            file.write(data)
        os.fsync(fd)
        os.chmod(temp, mode)
    except BaseException:
        temp.unlink(missing_ok=True)
        locks.release(held)
        raise
    finally:
        os.close(fd)
    return temp, held


def write_new_file(target: Path, data: bytes) -> None:
    """Atomically create `target` holding `data`, read-only; never replaces an existing file.

    Raises:
        FileExistsError: `target` already exists; it is left untouched.
    """
    temp, held = _write_temp(target, data, 0o444)
    try:
        # os.link refuses an existing target in the same step that publishes the file, so two
        # writers can never both win, which an exists-check before os.replace cannot promise.
        os.link(temp, target)
    finally:
        temp.unlink(missing_ok=True)
        locks.release(held)
    fsync_dir(target.parent)


def replace_file(target: Path, data: bytes) -> None:
    """Atomically write `data` to `target`, replacing any previous content in one step."""
    temp, held = _write_temp(target, data, 0o644)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        locks.release(held)
    fsync_dir(target.parent)


# The errors a full disk, a quota or a file-size limit produce.
OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

