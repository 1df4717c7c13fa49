"""Per-epoch checkpoints of a running stage, kept beside the version's stages.

    <version>/checkpoints/<stage>/epoch-0003/manifest.json + files   committed checkpoint
    <version>/checkpoints/<stage>/.staging-epoch-0003-<hex>/         in progress, invisible

A stage commits its outputs only when it ends, so a run that is killed mid-training would
otherwise leave nothing to resume from. Each checkpoint is committed on its own, the same way
a stage is (staging folder, sealed sha256 manifest, one rename), so a crash leaves only whole
checkpoints.

A checkpoint's only pin is the sha256 of its own manifest, read from disk when it is listed:
anyone who can write the store can forge a self-consistent one (the seal is a plain sha256, no
secret). So the defence against a forged checkpoint is what the reader does with the bytes, not
the hashes: checkpoints hold only `.npz` arrays (read with allow_pickle=False), JSON and CSV,
and `read_checkpoint` hands the caller the very bytes it hashed, so nothing is reopened by path
between the check and the use. The hashes catch damage and careless edits.
"""

import os
import re
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from . import locks
from .errors import ArtifactCorrupt, ArtifactError, ArtifactExists, ArtifactNotFound
from .layout import CHECKPOINTS_DIR, VERSION_RECORD
from .manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    SEAL_KEY,
    fsync_dir,
    list_entries,
    make_dir,
    make_read_only,
    read_regular,
    read_sealed,
    sealed_json,
    sha256_bytes,
    sha256_file,
    utc_now,
)
from .names import NAME_PATTERN, VersionRef, check_stage
from .writer import close_staging

CHECKPOINT_HINT = "run `quantgate fsck` to list the damage, and resume from another version or start a fresh run"

# An unsealed manifest as quantgate wrote them before checkpoints held no pickle: never loaded, not damage.
LEGACY_CHECKPOINT = "legacy-checkpoint"


@dataclass(frozen=True)
class CheckpointRef:
    """One committed checkpoint, pinned by the sha256 of its manifest."""

    model: str
    version: str
    stage: str
    name: str
    path: str
    manifest_sha256: str


class CheckpointWriter:
    """A staging folder (`dir`) that becomes checkpoint `name` of a stage on a clean exit."""

    def __init__(self, version: VersionRef, stage: str, name: str, target: Path):
        self.dir = target.parent / f".staging-{name}-{uuid.uuid4().hex}"
        self._version, self._stage, self._name, self._target = version, stage, name, target
        self._label = f"checkpoint {name!r} of stage {stage!r} of model {version.model!r} {version.version}"
        self.ref: CheckpointRef | None = None
        self._lock: locks.Held | None = None

    def __enter__(self) -> "CheckpointWriter":
        if self._target.exists():
            raise ArtifactExists(f"{self._label} is already committed and immutable; use a new checkpoint name")
        try:
            make_dir(self.dir.parent)
            # Created under its lock: fsck never sees it unheld, so never takes a live run's folder for a leftover.
            self._lock = locks.create_dir(self.dir)
        except OSError as exc:
            raise ArtifactError(f"cannot create a staging folder for {self._label}: {exc.strerror or exc}") from exc
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        try:
            close_staging(self.dir, self._label, self._commit, exc)
            return False
        finally:
            locks.release(self._lock)
            self._lock = None

    def _commit(self) -> None:
        files = {}
        for relpath in list_entries(self.dir):
            path = self.dir / relpath
            if relpath == MANIFEST_NAME or not stat.S_ISREG(os.lstat(path).st_mode):
                raise ArtifactError(f"{self._label}: {relpath!r} must be a regular file not named {MANIFEST_NAME}")
            digest, size = sha256_file(path, fsync=True)
            make_read_only(path)
            files[relpath] = {"sha256": digest, "bytes": size}
        data = sealed_json({
            "schema": SCHEMA_VERSION, "model": self._version.model, "version": self._version.version,
            "stage": self._stage, "checkpoint": self._name, "files": files, "created_at": utc_now(),
        })
        with open(self.dir / MANIFEST_NAME, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        make_read_only(self.dir / MANIFEST_NAME)
        fsync_dir(self.dir)
        try:
            os.rename(self.dir, self._target)  # fails onto a non-empty folder: one writer wins
        except OSError as exc:
            raise ArtifactExists(f"{self._label} could not be committed: {exc.strerror or exc}") from exc
        fsync_dir(self._target.parent)
        self.ref = CheckpointRef(self._version.model, self._version.version, self._stage, self._name,
                                 str(self._target), sha256_bytes(data))


def checkpoint_folder(version: VersionRef, stage: str) -> Path:
    return Path(version.path) / CHECKPOINTS_DIR / check_stage(stage)


def open_checkpoint_writer(version: VersionRef, stage: str, name: str) -> CheckpointWriter:
    """A CheckpointWriter for checkpoint `name` of `stage` in the existing `version`; see ArtifactStore."""
    if (Path(version.path) / VERSION_RECORD).exists():
        raise ArtifactExists(
            f"cannot checkpoint stage {stage!r} of model {version.model!r} {version.version}: the version is finalized"
        )
    check_stage(name)  # checkpoint names follow the stage naming rules
    return CheckpointWriter(version, stage, name, checkpoint_folder(version, stage) / name)


def latest_checkpoint(version: VersionRef, stage: str) -> CheckpointRef:
    """The newest committed checkpoint of `stage` in the existing `version`; see ArtifactStore."""
    refs = committed_checkpoints(version, stage)
    if not refs:
        raise ArtifactNotFound(
            f"model {version.model!r} {version.version} has no committed {stage} checkpoint "
            "(its training ended before the first epoch finished, or it predates checkpoints); "
            "start a fresh run instead"
        )
    return refs[-1]


def committed_checkpoints(version: VersionRef, stage: str) -> list[CheckpointRef]:
    """Committed checkpoints of a stage, oldest first: epoch-9999 before epoch-10000."""
    folder = checkpoint_folder(version, stage)
    if not folder.is_dir():
        return []
    refs = []
    for entry in sorted(folder.iterdir(), key=lambda path: _numeric_order(path.name)):
        manifest = entry / MANIFEST_NAME
        if NAME_PATTERN.fullmatch(entry.name) and manifest.is_file():
            refs.append(CheckpointRef(version.model, version.version, stage, entry.name, str(entry),
                                      sha256_bytes(manifest.read_bytes())))
    return refs


def _numeric_order(name: str) -> tuple:
    """Sort key comparing digit runs as numbers: text sorts epoch-10000 before epoch-9999."""
    # re.split with a group alternates text and digits, so equal positions always hold equal types.
    parts = re.split(r"(\d+)", name)
    return (tuple(int(part) if index % 2 else part for index, part in enumerate(parts)), name)


def read_checkpoint(ref: CheckpointRef) -> dict[str, bytes]:
    """Every file of a checkpoint, read once and checked against `ref`: relative path -> the bytes hashed.

    Callers deserialise these bytes and never reopen the files, so what they load is what was verified.

    Raises:
        ArtifactNotFound: the checkpoint's manifest is gone.
        ArtifactCorrupt: the manifest is malformed, unsealed, for another checkpoint or changed since it
            was listed, or a file is missing, extra, not a regular file or changed.
    """
    folder = Path(ref.path)
    label = f"checkpoint {ref.name!r} of model {ref.model!r} {ref.version} stage {ref.stage!r}"
    where, hint = f"{label} ({folder})", CHECKPOINT_HINT
    try:
        data = read_regular(folder / MANIFEST_NAME)
    except FileNotFoundError as exc:
        raise ArtifactNotFound(f"{where} has no {MANIFEST_NAME}: it was removed after it was listed") from exc
    except OSError as exc:
        raise ArtifactCorrupt(f"the manifest of {where} is not a regular file ({exc.strerror or exc}); {hint}") from exc
    if sha256_bytes(data) != ref.manifest_sha256:
        raise ArtifactCorrupt(f"the manifest of {where} changed after it was committed; {hint}",
                              kind="hash-mismatch")
    record = read_sealed(data, f"{folder / MANIFEST_NAME} (the manifest of {label})", hint)
    listed = _listed_files(record, ref, where, hint)
    present = set(list_entries(folder)) - {MANIFEST_NAME}
    if present != set(listed):
        raise ArtifactCorrupt(
            f"{where} has missing {sorted(set(listed) - present)} or unlisted {sorted(present - set(listed))} "
            f"files; {hint}", kind="extra-file" if present - set(listed) else "missing-file",
        )
    contents = {}
    for relpath, expected in sorted(listed.items()):
        try:
            content = read_regular(folder / relpath)
        except OSError as exc:  # a symlink (ELOOP), a folder, a file removed since the listing
            raise ArtifactCorrupt(f"{relpath} of {where} cannot be read as a regular file "
                                  f"({exc.strerror or exc}); {hint}", kind="missing-file") from exc
        actual = sha256_bytes(content)
        if actual != expected:
            raise ArtifactCorrupt(
                f"{relpath} of {where} does not match its manifest: expected sha256 {expected}, got {actual}; "
                f"it must not be loaded; {hint}", kind="hash-mismatch",
            )
        contents[relpath] = content
    return contents


def _listed_files(record: dict, ref: CheckpointRef, where: str, hint: str) -> dict[str, str]:
    """The manifest's relative path -> sha256, after checking it is a sealed manifest of this checkpoint."""
    if SEAL_KEY not in record:
        raise ArtifactCorrupt(f"the manifest of {where} carries no seal: it was written by an older quantgate, "
                              f"whose checkpoints held pickles, and is never loaded; {hint}", kind=LEGACY_CHECKPOINT)
    owner = {"model": ref.model, "version": ref.version, "stage": ref.stage, "checkpoint": ref.name}
    moved = {key: record.get(key) for key, value in owner.items() if record.get(key) != value}
    if moved:
        raise ArtifactCorrupt(f"the manifest of {where} names another checkpoint ({moved}); it was copied "
                              f"from elsewhere; {hint}")
    files = record.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("sha256"), str) for entry in files.values()
    ):
        raise ArtifactCorrupt(f"the manifest of {where} has no valid 'files' listing; {hint}")
    return {relpath: entry["sha256"] for relpath, entry in files.items()}


def verify_checkpoint_files(ref: CheckpointRef) -> Path:
    """Re-hash a checkpoint against `ref`; return its folder only if every byte matches.

    Use `read_checkpoint` to load one: files reopened from this folder may have changed since.

    Raises:
        ArtifactNotFound: the checkpoint's manifest is gone.
        ArtifactCorrupt: see `read_checkpoint`.
    """
    read_checkpoint(ref)
    return Path(ref.path)
