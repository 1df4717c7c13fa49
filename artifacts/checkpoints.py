"""Per-epoch checkpoints of a running stage, kept beside the version's stages.

    <version>/checkpoints/<stage>/epoch-0003/manifest.json + files   committed checkpoint
    <version>/checkpoints/<stage>/.staging-epoch-0003-<hex>/         in progress, invisible

A stage commits its outputs only when it ends, so a run that is killed mid-training would
otherwise leave nothing to resume from. Each checkpoint is committed on its own, the same way
a stage is (staging folder, sha256 manifest, one rename), so a crash leaves only whole
checkpoints. They hold pickle-based files: `verify_checkpoint` re-hashes every byte before a
caller may load one.
"""

import json
import os
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
    canonical_json,
    fsync_dir,
    list_entries,
    make_read_only,
    sha256_bytes,
    sha256_file,
    utc_now,
)
from .names import NAME_PATTERN, VersionRef, check_stage
from .verify import REBUILD_HINT
from .writer import close_staging


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
        self._lock: int | None = None

    def __enter__(self) -> "CheckpointWriter":
        if self._target.exists():
            raise ArtifactExists(f"{self._label} is already committed and immutable; use a new checkpoint name")
        try:
            self.dir.mkdir(parents=True)
            self._lock = locks.hold(self.dir)  # fsck: a staging folder nobody holds is a crash's leftover
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
        data = canonical_json({
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
    """Committed checkpoints of a stage, sorted by name (epoch-0001, epoch-0002, ...)."""
    folder = checkpoint_folder(version, stage)
    if not folder.is_dir():
        return []
    refs = []
    for entry in sorted(folder.iterdir()):
        manifest = entry / MANIFEST_NAME
        if NAME_PATTERN.fullmatch(entry.name) and manifest.is_file():
            refs.append(CheckpointRef(version.model, version.version, stage, entry.name, str(entry),
                                      sha256_bytes(manifest.read_bytes())))
    return refs


def verify_checkpoint_files(ref: CheckpointRef) -> Path:
    """Re-hash a checkpoint against `ref`; return its folder only if every byte matches.

    Raises:
        ArtifactCorrupt: the manifest or a file changed, or a file is missing or extra.
    """
    folder = Path(ref.path)
    where = f"checkpoint {ref.name!r} of model {ref.model!r} {ref.version} stage {ref.stage!r} ({folder})"
    data = (folder / MANIFEST_NAME).read_bytes()
    if sha256_bytes(data) != ref.manifest_sha256:
        raise ArtifactCorrupt(f"the manifest of {where} changed after it was committed; {REBUILD_HINT}")
    listed = {relpath: entry["sha256"] for relpath, entry in json.loads(data)["files"].items()}
    present = set(list_entries(folder)) - {MANIFEST_NAME}
    if present != set(listed):
        raise ArtifactCorrupt(
            f"{where} has missing {sorted(set(listed) - present)} or unlisted {sorted(present - set(listed))} "
            f"files; {REBUILD_HINT}"
        )
    for relpath, expected in sorted(listed.items()):
        path = folder / relpath
        actual = "a symlink" if path.is_symlink() else sha256_file(path)[0]
        if actual != expected:
            raise ArtifactCorrupt(
                f"{relpath} of {where} does not match its manifest: expected sha256 {expected}, got {actual}; "
                "it must not be loaded (it is pickle-based)"
            )
    return folder
