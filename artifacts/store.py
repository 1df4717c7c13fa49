"""The artifact store: the only code that knows where versions, stages and aliases live.

`ArtifactStore` is the one public entry point; it checks names and looks versions up, then
hands the work to the module that owns it:

    layout.py, paths.py      the names on disk and the paths built from them
    versions.py              allocating, listing and finalizing versions
    writer.py, reading.py    committing stages, and verifying them before any read
    checkpoints.py           per-epoch checkpoints of a running stage
    releases.py              alias moves (audited) and later gate decisions (store_releases.py: their public methods)
    run_log.py               the run's append-only log

Writers hold a lock on whatever they build (see locks.py), so `fsck` tells a live writer from a crash's leftover.

Versions and stages only ever appear by an atomic mkdir or rename and are never rewritten;
aliases are the one mutable thing: under the model's alias lock each change first appends its
line to the model's audit log (the commit point), then replaces the whole alias file in one step.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import checkpoints, holders, locks, paths, reading, reuse, run_log, versions
from .cache import ContentCache
from .checkpoints import (
    CheckpointRef,
    CheckpointWriter,
    committed_checkpoints,
    read_checkpoint,
    verify_checkpoint_files,
)
from .lineage import walk_lineage
from .manifest import to_json_safe
from .names import StageRef, VersionInfo, VersionRef, check_model, check_stage
from .store_releases import AliasesAndDecisions
from .writer import StageWriter, open_stage_writer


class ArtifactStore(AliasesAndDecisions):
    """Versioned, content-hashed storage for pipeline stage outputs, rooted at one folder."""

    def __init__(self, root: str | os.PathLike):
        """Open the store at `root`, creating the folder if needed.

        Raises:
            StoreNotWritable: `root` cannot be created or written to.
        """
        self.root = versions.prepare_root(Path(root).expanduser())

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    @property
    def location(self) -> str:
        """Where the store is, as the user names it (--store): this folder; a URL for a store in a bucket."""
        return str(self.root)

    def shown(self, relpath: str) -> str:
        """Where the store's entry `relpath` (a path relative to the root, as the store returns them) is."""
        return str(self.root / relpath)

    def version_location(self, version_ref: VersionRef) -> str:
        """Where a version is, as messages show it: its folder here; its URL in a bucket."""
        return version_ref.path

    def remote_problems(self, model: str | None = None) -> list:
        """What only a remote store can show fsck (fsck.Problem's); none for a folder."""
        return []

    def repair_remote(self, problem) -> bool:
        """Repair one of `remote_problems`; a folder has none."""
        return False

    def version_is_running(self, model: str, version: str) -> bool:
        """Whether a live run holds the version (fsck: running, not interrupted): a flock on its folder."""
        return locks.is_held(paths.version_dir(self.root, model, version))

    # -- versions ---------------------------------------------------------------------------

    def create_version(self, model: str) -> VersionRef:
        """Allocate the next version (v1, v2, ...) of `model`; safe across concurrent processes.

        Raises:
            InvalidName: `model` breaks the naming rules.
            StoreNotWritable: the version folder cannot be created.
        """
        return versions.create_version(self.root, model)

    @contextmanager
    def hold_version(self, version_ref: VersionRef) -> Iterator[None]:
        """Mark the version as being written for the block (a flock on its folder).

        `fsck` reports an unfinalized version nobody holds as interrupted, one that is held as running.
        """
        fd = locks.hold(Path(self._existing(version_ref).path))
        holders.record_owner(fd)  # so fsck can name processes that outlive this run and still hold it
        try:
            yield
        finally:
            locks.release(fd)

    def version(self, model: str, version: str) -> VersionRef:
        """The existing `version` of `model`; its `path` is the version folder.

        Raises:
            InvalidName: `model` or `version` breaks the naming rules.
            ArtifactNotFound: there is no such version; the message lists the ones that exist.
        """
        return versions.find_version(self.root, model, version)

    def models(self) -> list[str]:
        """Names of the models that have a versions folder in this store, sorted."""
        return versions.model_names(self.root)

    def versions(self, model: str | None = None) -> list[VersionInfo]:
        """Every version of `model` (of all models if None), sorted by model, then version number.

        An unknown model has no versions, so it yields an empty list. A damaged version record
        shows as status "corrupt" and a damaged alias file is left out; `fsck` explains both.

        Raises:
            InvalidName: `model` breaks the naming rules.
        """
        models = [check_model(model)] if model is not None else self.models()
        return versions.version_infos(self.root, models)

    def finalize_version(self, version_ref: VersionRef, record: dict) -> None:
        """Write the version's final record, version.json; a version is finalized only once.

        The store adds model, version, finalized_at and "stages" ({stage: manifest sha256}),
        overriding any keys of those names in `record`. The run log is not part of the record.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactError: `record` is not a dict with a string "status", or is not JSON-safe.
            ArtifactExists: the version is already finalized.
        """
        versions.finalize_version(self.root, self._existing(version_ref), record)

    def version_record(self, version_ref: VersionRef) -> dict:
        """The version's final record (version.json), or {} while it is not finalized.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactCorrupt: version.json is not valid JSON.
        """
        ref = self._existing(version_ref)
        return versions.read_version_record(self.root, ref.model, ref.version)

    def stage_dir(self, version_ref: VersionRef, stage: str) -> Path:
        """The folder where `stage` of the version is (or, once committed, will be); no I/O.

        Read a stage's files through `stage_ref` and `verify_stage`, never straight from here.

        Raises:
            InvalidName: a name breaks the naming rules.
        """
        return paths.stage_dir(self.root, version_ref.model, version_ref.version, stage)

    # -- run log ----------------------------------------------------------------------------

    def run_log_path(self, version_ref: VersionRef) -> Path:
        """Where the version's run log (versions/vN/run.log) is; no I/O.

        The log is informational: not hashed, not in version.json, appended to even after
        the version is finalized. Write it with `append_run_log`.

        Raises:
            InvalidName: a name breaks the naming rules.
        """
        return paths.run_log_file(self.root, version_ref.model, version_ref.version)

    def append_run_log(self, version_ref: VersionRef, text: str) -> None:
        """Append `text` to the version's run log (created if needed), never through a symlink, and fsync it.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactNotFound: the version folder does not exist.
            ArtifactError: `text` is not a str, or run.log is not a regular file.
            StoreFull: the store ran out of space.
        """
        path = self.run_log_path(version_ref)
        run_log.append_text(path, version_ref, text, paths.relative(self.root, path))

    # -- stages -----------------------------------------------------------------------------

    def write_stage(self, version_ref: VersionRef, stage: str, config: dict,
                    inputs: dict[str, StageRef], input_digest: str | None = None,
                    reused_from: dict | None = None) -> StageWriter:
        """A context manager whose folder (`writer.dir`) becomes stage `stage` on a clean exit.

        Fill `writer.metrics` inside the block; read `writer.ref` after it. `input_digest`
        (from `input_digest()`) is recorded so later runs can reuse the stage.

        Raises:
            InvalidName: `stage` breaks the naming rules.
            ArtifactNotFound: the version or an input stage does not exist.
            ArtifactExists: the stage is already committed or the version is finalized
                (checked again at commit).
            ArtifactCorrupt: an input's manifest no longer matches its ref.
            ArtifactError: `config` or the metrics cannot be stored as JSON.
        """
        return open_stage_writer(self.root, self._existing(version_ref), stage, config, inputs,
                                 input_digest, reused_from)

    def input_digest(self, stage: str, config: dict, inputs: dict[str, StageRef], environment: dict) -> str:
        """The digest of everything that decides `stage`'s output (see artifacts/reuse.py).

        `environment` holds what the store cannot see: the stage's code version, the device.

        Raises:
            the errors of read_manifest, for any input.
        """
        manifests = {name: self.read_manifest(ref) for name, ref in inputs.items()}
        return reuse.input_digest(check_stage(stage), to_json_safe(config, "config"), manifests, environment)

    def find_reusable(self, model: str, stage: str, input_digest: str) -> StageRef | None:
        """The newest committed `stage` of any version of `model` with this input digest whose files
        all verify, or None. Damaged candidates are skipped (fsck reports them), never reused.
        """
        return reading.find_reusable(self.root, model, stage, input_digest)

    def reuse_stage(self, version_ref: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                    source: StageRef, input_digest: str) -> StageRef:
        """Commit `stage` of a version from `source`'s verified files (hard links when possible).

        The manifest keeps the source's metrics and says `reused_from`; the files are re-hashed
        on commit like any stage's.

        Raises:
            the errors of write_stage and verify_stage.
        """
        source_dir, source_manifest = reading.verified_stage(self.root, source)
        reused_from = {"version": source.version, "manifest_sha256": source.manifest_sha256}
        with self.write_stage(version_ref, stage, config, inputs, input_digest, reused_from) as writer:
            reuse.link_or_copy(source_dir, sorted(source_manifest["files"]), writer.dir)
            writer.metrics.update(source_manifest["metrics"])
        return writer.ref

    def verify_version(self, model: str, version: str) -> dict:
        """Check a finalized version end to end: its record, each stage's manifest and every file.

        Returns the version record.

        Raises:
            ArtifactNotFound: the version does not exist or is not finalized.
            ArtifactCorrupt: the record, a manifest or a file does not match what was committed.
        """
        return reading.verify_finalized_version(self.root, self.version(model, version))

    def stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        """A ref to the committed `stage` of a version, pinned to its current manifest digest.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactNotFound: the version or stage does not exist (staging folders do not count).
        """
        return reading.current_stage_ref(self._existing(version_ref), stage)

    def finalized_stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        """A ref to `stage` pinned to the digest recorded in version.json when the version was finalized.

        Reading through it proves the stage is still what the version's record says it was.

        Raises:
            ArtifactNotFound: the version is not finalized, or its record lists no such stage.
            ArtifactCorrupt: version.json is not valid JSON.
        """
        return reading.finalized_stage_ref(self.root, self._existing(version_ref), stage)

    def verify_stage(self, ref: StageRef) -> Path:
        """Re-hash a committed stage against `ref`; return its folder only if every byte matches.

        Raises:
            InvalidName: a name in `ref` breaks the naming rules.
            ArtifactNotFound: the stage folder or its manifest is gone.
            ArtifactCorrupt: the manifest or a file changed, or a file is missing or extra.
        """
        return reading.verified_stage(self.root, ref)[0]

    def read_manifest(self, ref: StageRef) -> dict:
        """The manifest of a committed stage, after verifying the whole stage against `ref`.

        Raises:
            the same errors as verify_stage.
        """
        return reading.verified_stage(self.root, ref)[1]

    def lineage_problems(self, ref: StageRef) -> list[str]:
        """Why `ref`'s outputs may not belong to its inputs as they are now; [] if every input matches.

        Walks the inputs recorded in each manifest, transitively: each must still be committed
        with the manifest digest that was recorded, and its files must re-hash to that manifest.
        """
        return walk_lineage(ref, self.read_manifest, lambda model, version, stage: paths.stage_dir(
            self.root, model, version, stage))

    # -- checkpoints ------------------------------------------------------------------------

    def write_checkpoint(self, version_ref: VersionRef, stage: str, name: str) -> CheckpointWriter:
        """A context manager whose folder (`writer.dir`) becomes checkpoint `name` of `stage` on a clean exit.

        Raises:
            InvalidName: `stage` or `name` breaks the naming rules.
            ArtifactNotFound: the version does not exist.
            ArtifactExists: the version is finalized, or the checkpoint is already committed.
        """
        return checkpoints.open_checkpoint_writer(self._existing(version_ref), stage, name)

    def checkpoints(self, version_ref: VersionRef, stage: str) -> list[CheckpointRef]:
        """The committed checkpoints of `stage` in a version, oldest first (staging folders do not count).

        Raises:
            ArtifactNotFound: the version does not exist.
        """
        return committed_checkpoints(self._existing(version_ref), stage)

    def latest_checkpoint(self, version_ref: VersionRef, stage: str) -> CheckpointRef:
        """The newest committed checkpoint of `stage` in a version.

        Raises:
            ArtifactNotFound: the version does not exist or has no committed checkpoint of `stage`.
        """
        return checkpoints.latest_checkpoint(self._existing(version_ref), stage)

    def verify_checkpoint(self, ref: CheckpointRef) -> Path:
        """Re-hash a checkpoint (ArtifactCorrupt if changed); its folder. To load one, use read_checkpoint."""
        return verify_checkpoint_files(ref)

    def read_checkpoint(self, ref: CheckpointRef) -> dict[str, bytes]:
        """Every file of a checkpoint, read once and checked against `ref` (see checkpoints.read_checkpoint)."""
        return read_checkpoint(ref)

    # -- cache ------------------------------------------------------------------------------

    def cache(self, kind: str, salt: str = "") -> ContentCache:
        """Content-addressed results of one `kind` shared by all versions, keyed by `salt` too (cache.py)."""
        return ContentCache(self.root, check_stage(kind), salt)

    # -- internals --------------------------------------------------------------------------

    def _existing(self, version_ref: VersionRef) -> VersionRef:
        # Re-looked up in this store: a ref may come from another process or a pickled task result.
        return self.version(version_ref.model, version_ref.version)
