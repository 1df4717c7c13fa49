"""Reusing a committed stage by the digest of its inputs, instead of recomputing it.

A stage's input digest is the sha256 of everything that decides its output: the stage name,
its config section, its code version, the library versions and device it runs with, and the
*content* of its inputs (the sha256 of each input's file listing, not the input manifests,
which also hold version names and times). Two runs with equal digests compute equal stages,
so the later run may take the earlier one's verified files instead of recomputing them.
"""

import errno
import os
import shutil
from pathlib import Path

from .errors import ArtifactCorrupt
from .manifest import MANIFEST_NAME, canonical_json, library_versions, read_sealed, sha256_bytes
from .names import StageRef

# Nothing is reused across these: a rerun under a new schema recomputes everything.
DIGEST_SCHEMA = 1


def content_digest(manifest: dict) -> str:
    """sha256 of a stage's file listing ({relpath: sha256}): equal for stages holding equal bytes."""
    listing = {relpath: entry["sha256"] for relpath, entry in manifest["files"].items()}
    return sha256_bytes(canonical_json(listing))


def input_digest(stage: str, config: dict, input_manifests: dict[str, dict], environment: dict) -> str:
    """The digest that decides whether a stage can be reused; see the module docstring."""
    return sha256_bytes(canonical_json({
        "schema": DIGEST_SCHEMA,
        "stage": stage,
        "config": config,
        "inputs": {name: content_digest(manifest) for name, manifest in sorted(input_manifests.items())},
        "libraries": dict(library_versions()),
        "environment": environment,
    }))


def candidate_manifest(stage_dir: Path, store_root: Path) -> tuple[bytes, dict] | None:
    """The bytes and parsed manifest of a committed stage, or None if it is missing or damaged.

    A damaged candidate is simply not reused (fsck reports it); the run recomputes instead.
    """
    try:
        data = (stage_dir / MANIFEST_NAME).read_bytes()
        return data, read_sealed(data, stage_dir.relative_to(store_root).as_posix(), "")
    except (OSError, ArtifactCorrupt):
        return None


def link_or_copy(source_dir: Path, relpaths: list[str], target_dir: Path) -> None:
    """Hard-link each file (committed files are immutable, so sharing an inode is safe), else copy."""
    for relpath in relpaths:
        source, target = source_dir / relpath, target_dir / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            shutil.copyfile(source, target)


def reuse_note(source: StageRef, digest: str) -> str:
    """What the log says: "reused from v3 (inputs digest 1a2b3c4d5e6f…)"."""
    return f"reused from {source.version} (inputs digest {digest[:12]}…)"
