"""How a bundle turns records into bytes: canonical JSON, a seal, and sha256 while copying.

A bundle leaves the store, so it carries its own small copy of these habits instead of importing
the store's internals: records are canonical JSON (sorted keys, no NaN) so equal content gives
equal bytes, and `bundle.json` carries the sha256 of its own body, so an edit to it is detected too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

SEAL_KEY = "bundle_sha256"
_CHUNK_BYTES = 1 << 20


def json_safe(value: object) -> object:
    """`value` with NaN and infinities as None and tuples as lists, so strict JSON can hold it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def canonical_json(value: object) -> bytes:
    """Sorted, indented, strict JSON with a trailing newline."""
    return (json.dumps(json_safe(value), sort_keys=True, indent=2, allow_nan=False) + "\n").encode("utf-8")


def sealed_json(record: dict) -> bytes:
    """canonical_json of `record` plus SEAL_KEY: the sha256 of the canonical record without it."""
    body = {key: value for key, value in record.items() if key != SEAL_KEY}
    return canonical_json({**body, SEAL_KEY: hashlib.sha256(canonical_json(body)).hexdigest()})


def seal_matches(record: dict) -> bool:
    body = {key: value for key, value in record.items() if key != SEAL_KEY}
    return record.get(SEAL_KEY) == hashlib.sha256(canonical_json(body)).hexdigest()


def sha256_file(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, read in chunks."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def copy_hashed(source: Path, target: Path) -> tuple[str, int]:
    """Copy `source` to the new file `target` (fsynced); return the sha256 and size of the bytes written.

    The digest is of what was copied, not of what the source held earlier, so the caller can compare
    it with the store's record and know the copy is exactly what was gated.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as reader, open(target, "xb") as writer:
        while chunk := reader.read(_CHUNK_BYTES):
            digest.update(chunk)
            writer.write(chunk)
            size += len(chunk)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest(), size


def write_new(target: Path, data: bytes) -> tuple[str, int]:
    """Write `data` to the new file `target` (fsynced); return its sha256 and size."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as writer:
        writer.write(data)
        writer.flush()
        os.fsync(writer.fileno())
    return hashlib.sha256(data).hexdigest(), len(data)


def fsync_folder(folder: Path) -> None:
    """fsync a folder's entries (a new file or a rename in it)."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(root: Path) -> None:
    """fsync every folder under `root` (and `root`), so the files the bundle holds are reachable after a crash."""
    for folder, _, _ in os.walk(root):
        fsync_folder(Path(folder))
