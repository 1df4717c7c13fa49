"""Writing one stage: a private staging folder that becomes a committed stage in one rename."""

import errno
import os
import shutil
import stat
import time
import uuid
from pathlib import Path

from . import locks
from .errors import ArtifactError, ArtifactExists, StoreFull
from .layout import VERSION_RECORD
from .manifest import (
    MANIFEST_NAME,
    OUT_OF_SPACE,
    SCHEMA_VERSION,
    fsync_dir,
    library_versions,
    list_entries,
    make_read_only,
    sealed_json,
    sha256_bytes,
    sha256_file,
    to_json_safe,
    utc_now,
)
from .names import StageRef, VersionRef, check_stage
from .paths import stage_dir
from .verify import read_pinned_manifest

STAGING_PREFIX = ".staging-"


def storage_error(exc: OSError, doing: str) -> ArtifactError:
    """The store error for an OSError met while `doing` something: StoreFull when space ran out."""
    if exc.errno in OUT_OF_SPACE:
        return StoreFull(
            f"the artifact store ran out of space while {doing} ({exc.strerror or exc}); nothing half-written "
            "was kept and no alias moved: free space (or raise the file-size limit) and run again; "
            "completed stages are reused"
        )
    return ArtifactError(f"cannot finish {doing}: {exc.strerror or exc} ({exc.filename}); "
                         "check that the store is writable, then run again")


def close_staging(staging: Path, label: str, commit, failure: BaseException | None) -> None:
    """End a staging folder's with-block: commit it, or remove it and let the failure propagate.

    Running out of space, while writing or while committing, becomes StoreFull; any other failure
    inside the block propagates unchanged. The folder never outlives a failure.
    """
    if failure is not None:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(failure, OSError) and failure.errno in OUT_OF_SPACE:
            raise storage_error(failure, f"writing {label}") from failure
        return
    try:
        commit()
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise storage_error(exc, f"committing {label}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def open_stage_writer(root: Path, ref: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                      input_digest: str | None = None, reused_from: dict | None = None) -> "StageWriter":
    """A StageWriter for `stage` of the existing version `ref`, after every argument is checked.

    See ArtifactStore.write_stage for what is checked and raised.
    """
    version_dir = Path(ref.path)
    target = version_dir / check_stage(stage)
    label = f"stage {stage!r} of model {ref.model!r} {ref.version}"
    if (version_dir / VERSION_RECORD).exists():
        raise ArtifactExists(
            f"cannot write {label}: the version is finalized and takes no new stages; create a new version"
        )
    if target.exists():
        raise ArtifactExists(f"{label} is already committed and immutable; write this run into a new version")
    if not isinstance(config, dict):
        raise ArtifactError(f"config for {label} must be a dict; got {type(config).__name__}")
    safe_config = to_json_safe(config, "config")
    if not isinstance(inputs, dict):
        raise ArtifactError(f"inputs of {label} must be a dict of name -> StageRef; got {type(inputs).__name__}")
    for name, input_ref in inputs.items():
        if not isinstance(name, str) or not isinstance(input_ref, StageRef):
            raise ArtifactError(
                f"inputs of {label} must map names to StageRef, got {name!r}: {type(input_ref).__name__}; "
                "pass the .ref of a committed stage writer or store.stage_ref(...)"
            )
        read_pinned_manifest(stage_dir(root, input_ref.model, input_ref.version, input_ref.stage), input_ref, root)
    return StageWriter(ref, stage, safe_config, dict(inputs), target, version_dir / VERSION_RECORD, root,
                       input_digest=input_digest, reused_from=reused_from)


class StageWriter:
    """The staging folder of one stage; a clean exit of its with-block commits it.

    Made by ArtifactStore.write_stage. Readers never see the staging folder: the commit
    hashes every file, writes manifest.json and renames the complete folder into place in
    one step. An exception inside the block removes the folder and propagates unchanged.
    """

    def __init__(self, version: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                 target: Path, version_record: Path, store_root: Path, input_digest: str | None = None,
                 reused_from: dict | None = None):
        self.dir = target.parent / f"{STAGING_PREFIX}{stage}-{uuid.uuid4().hex}"
        self.metrics: dict = {}
        self._input_digest = input_digest
        self._reused_from = reused_from
        self._lock: locks.Held | None = None
        self._version = version
        self._stage = stage
        self._config = config
        self._inputs = {
            name: {"model": ref.model, "version": ref.version, "stage": ref.stage,
                   "manifest_sha256": ref.manifest_sha256}
            for name, ref in inputs.items()
        }
        self._target = target
        self._version_record = version_record
        self._store_root = store_root
        self._label = f"stage {stage!r} of model {version.model!r} {version.version}"
        self._ref: StageRef | None = None
        self._started_at = ""
        self._started = 0.0

    @property
    def ref(self) -> StageRef:
        """The committed stage.

        Raises:
            ArtifactError: the with-block has not finished committing yet.
        """
        if self._ref is None:
            raise ArtifactError(f"{self._label} is not committed yet; read writer.ref after the with-block ends")
        return self._ref

    def __enter__(self) -> "StageWriter":
        try:
            # Created under its lock, held until commit or clean-up: fsck treats an unlocked
            # staging folder as a crash's leftover, so it must never be seen without one.
            self._lock = locks.create_dir(self.dir)
        except OSError as exc:
            raise ArtifactError(
                f"cannot create the staging folder {self._relative(self.dir)} for {self._label}: "
                f"{exc.strerror or exc}; check that the store is writable"
            ) from exc
        self._started_at = utc_now()
        self._started = time.monotonic()
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        try:
            close_staging(self.dir, self._label, self._commit, exc)
            return False  # an exception inside the block propagates unchanged
        finally:
            locks.release(self._lock)
            self._lock = None

    def _commit(self) -> None:
        metrics = to_json_safe(self.metrics, "metrics")
        files = self._hash_outputs()
        manifest = {
            "schema": SCHEMA_VERSION,
            "model": self._version.model,
            "version": self._version.version,
            "stage": self._stage,
            "config": self._config,
            "inputs": self._inputs,
            "input_digest": self._input_digest,
            "reused_from": self._reused_from,
            "files": files,
            "metrics": metrics,
            "libraries": dict(library_versions()),
            "started_at": self._started_at,
            "finished_at": utc_now(),
            "duration_s": round(time.monotonic() - self._started, 6),
        }
        data = sealed_json(manifest)
        manifest_path = self.dir / MANIFEST_NAME
        with open(manifest_path, "xb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        make_read_only(manifest_path)
        for dirpath, _, _ in os.walk(self.dir, topdown=False):
            fsync_dir(Path(dirpath))
        self._publish()
        self._ref = StageRef(self._version.model, self._version.version, self._stage,
                             str(self._target), sha256_bytes(data))

    def _hash_outputs(self) -> dict[str, dict]:
        files = {}
        for relpath in list_entries(self.dir):
            path = self.dir / relpath
            if relpath == MANIFEST_NAME:
                raise ArtifactError(
                    f"{self._label} wrote its own {MANIFEST_NAME}; the store writes that file, "
                    "so save the stage's file under another name"
                )
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise ArtifactError(
                    f"{self._label} produced {relpath!r}, which is not a regular file (a symlink, pipe "
                    "or socket); stage outputs must be real files so their bytes can be hashed and kept"
                )
            digest, size = sha256_file(path, fsync=True)
            make_read_only(path)
            files[relpath] = {"sha256": digest, "bytes": size}
        return files

    def _publish(self) -> None:
        if self._version_record.exists():
            raise ArtifactExists(
                f"model {self._version.model!r} {self._version.version} was finalized while {self._label} "
                "was running; a finalized version takes no new stages, so create a new version"
            )
        already = ArtifactExists(
            f"{self._label} is already committed at {self._relative(self._target)}; committed stages "
            "are immutable, so write this run into a new version"
        )
        if self._target.exists():
            raise already
        try:
            # A rename onto a non-empty folder fails, so of two racing writers only one commits.
            os.rename(self.dir, self._target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise already from exc
            raise ArtifactError(
                f"cannot commit {self._label} to {self._relative(self._target)}: {exc.strerror or exc}"
            ) from exc
        fsync_dir(self._target.parent)

    def _relative(self, path: Path) -> str:
        return path.relative_to(self._store_root).as_posix()
