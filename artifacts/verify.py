"""Checking a committed stage against its StageRef before anyone reads it.

The ref pins the sha256 of manifest.json and the manifest pins every file, so a stage that
passes both checks holds exactly the bytes that were committed. Callers load pickle-based
files only after this passes, which is why nothing here deserializes a stage file.
"""

import os
from pathlib import Path

from .errors import ArtifactCorrupt, ArtifactNotFound
from .manifest import MANIFEST_NAME, entry_kind, list_entries, read_regular, read_sealed, sha256_bytes, sha256_file
from .names import StageRef

REBUILD_HINT = "re-run the pipeline to produce a new version; committed data is never repaired in place"


def read_pinned_manifest(stage_dir: Path, ref: StageRef, store_root: Path) -> bytes:
    """The bytes of the stage's manifest.json, checked against `ref.manifest_sha256`.

    Raises:
        ArtifactNotFound: the stage has no manifest (never committed, or deleted).
        ArtifactCorrupt: the manifest's digest differs from the one in `ref`.
    """
    manifest_path = stage_dir / MANIFEST_NAME
    shown = manifest_path.relative_to(store_root).as_posix()
    try:
        data = read_regular(manifest_path)
    except FileNotFoundError as exc:
        raise ArtifactNotFound(
            f"stage {ref.stage!r} of model {ref.model!r} {ref.version} has no manifest at {shown}; "
            "it was never committed or has been deleted"
        ) from exc
    except OSError as exc:  # a symlink, FIFO or folder where the manifest was committed
        raise ArtifactCorrupt(
            f"{shown} of model {ref.model!r} {ref.version} is not the regular file that was committed "
            f"({exc.strerror or exc}); {REBUILD_HINT}", kind="malformed-manifest",
        ) from exc
    actual = sha256_bytes(data)
    if actual != ref.manifest_sha256:
        raise ArtifactCorrupt(
            f"{shown} of model {ref.model!r} {ref.version} changed after it was committed: "
            f"expected sha256 {ref.manifest_sha256}, got {actual}; {REBUILD_HINT}", kind="hash-mismatch",
        )
    return data


def verify_stage_files(stage_dir: Path, ref: StageRef, manifest_bytes: bytes, store_root: Path) -> dict:
    """Re-hash every file of the stage against its (already pinned) manifest; return the manifest.

    Raises:
        ArtifactCorrupt: the manifest is malformed or describes another stage, or a listed
            file is missing or changed, or an unlisted file is present.
    """
    where = f"model {ref.model!r} {ref.version} stage {ref.stage!r}"
    shown_manifest = (stage_dir / MANIFEST_NAME).relative_to(store_root).as_posix()
    manifest = read_sealed(manifest_bytes, f"{shown_manifest} of {where}", REBUILD_HINT)
    try:
        listed = {relpath: entry["sha256"] for relpath, entry in manifest["files"].items()}
        described = (manifest["model"], manifest["version"], manifest["stage"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArtifactCorrupt(f"manifest of {where} is malformed ({exc!r}); {REBUILD_HINT}") from exc
    if described != (ref.model, ref.version, ref.stage):
        raise ArtifactCorrupt(f"manifest of {where} describes {described} instead; {REBUILD_HINT}")

    def shown(relpath: str) -> str:
        return (stage_dir / relpath).relative_to(store_root).as_posix()

    present = set(list_entries(stage_dir)) - {MANIFEST_NAME}
    missing, extra = sorted(set(listed) - present), sorted(present - set(listed))
    if missing:
        raise ArtifactCorrupt(
            f"{shown(missing[0])} of {where} is missing: expected sha256 {listed[missing[0]]}, "
            f"found no file; {REBUILD_HINT}", kind="missing-file",
        )
    if extra:
        raise ArtifactCorrupt(
            f"{shown(extra[0])} in {where} is not listed in its manifest (expected no file, found one); "
            f"remove it or {REBUILD_HINT}", kind="extra-file",
        )
    for relpath, expected in sorted(listed.items()):
        path = stage_dir / relpath
        # lstat first: a symlink could point at matching bytes today and other bytes tomorrow, and
        # a FIFO planted in a stage would block the read forever; neither is followed or opened.
        kind = entry_kind(os.lstat(path).st_mode)
        actual = f"sha256 {sha256_file(path)[0]}" if kind == "a regular file" else kind
        if actual != f"sha256 {expected}":
            raise ArtifactCorrupt(
                f"{shown(relpath)} of {where} does not match its manifest: expected sha256 {expected}, "
                f"got {actual}; {REBUILD_HINT}", kind="hash-mismatch",
            )
    return manifest
