"""The artifact store: the only code that knows where versions, stages and aliases live.

    <root>/<model>/versions/v1/<stage>/manifest.json + files   committed stages
    <root>/<model>/versions/v1/.staging-<stage>-<hex>/          in progress, invisible to readers
    <root>/<model>/versions/v1/version.json                     the version's final record
    <root>/<model>/versions/v1/checkpoints/<stage>/<name>/      per-epoch checkpoints (checkpoints.py)
    <root>/<model>/versions/v1/decisions/0001.json              later gate decisions, write-once
    <root>/<model>/aliases/<alias>.json                         e.g. latest, release
    <root>/<model>/audit.jsonl                                  every alias move, appended

Writers hold an flock on whatever they are building (staging folders, temporary files, the
version folder of a running flow), so `fsck` can tell a live writer from a crash's leftovers.

Versions and stages only ever appear by an atomic mkdir or rename and are never rewritten;
aliases are the one mutable thing, and each change replaces the whole file in one step and
appends a line to the model's audit log under the same lock.
"""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import locks, reuse
from .aliases import aliases_by_version, read_alias, write_alias
from .audit import AUDIT_FILE, append_line, current_actor, locked_log, read_log
from .checkpoints import CheckpointRef, CheckpointWriter, checkpoint_folder, committed_checkpoints, verify_checkpoint_files
from .decisions import append_decision, read_decisions
from .lineage import walk_lineage
from .errors import ArtifactCorrupt, ArtifactError, ArtifactExists, ArtifactNotFound, StoreNotWritable
from .manifest import MANIFEST_NAME, OUT_OF_SPACE, read_sealed, sealed_json, sha256_bytes, to_json_safe, utc_now, write_new_file
from .cache import ContentCache
from .names import NAME_PATTERN, VERSION_PATTERN, StageRef, VersionInfo, VersionRef
from .names import check_alias, check_model, check_stage, check_version, version_number
from .verify import REBUILD_HINT, read_pinned_manifest, verify_stage_files
from .writer import StageWriter, storage_error

VERSION_RECORD = "version.json"


class ArtifactStore:
    """Versioned, content-hashed storage for pipeline stage outputs, rooted at one folder."""

    def __init__(self, root: str | os.PathLike):
        """Open the store at `root`, creating the folder if needed.

        Raises:
            StoreNotWritable: `root` cannot be created or written to.
        """
        self.root = _prepare_root(Path(root).expanduser())

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    # -- versions ---------------------------------------------------------------------------

    def create_version(self, model: str) -> VersionRef:
        """Allocate the next version (v1, v2, ...) of `model`; safe across concurrent processes.

        Raises:
            InvalidName: `model` breaks the naming rules.
            StoreNotWritable: the version folder cannot be created.
        """
        versions_dir = self._model_dir(model) / "versions"
        try:
            versions_dir.mkdir(parents=True, exist_ok=True)
            number = max(map(version_number, self._version_names(model)), default=0) + 1
            while True:
                try:
                    # mkdir either creates the folder or fails, so each process that gets
                    # through owns its number; a loser simply tries the next one.
                    (versions_dir / f"v{number}").mkdir()
                    break
                except FileExistsError:
                    number += 1
        except OSError as exc:
            raise StoreNotWritable(
                f"cannot create a new version of model {model!r} under {versions_dir}: "
                f"{exc.strerror or exc}; pass --store DIR or set QUANTGATE_STORE to a writable folder"
            ) from exc
        return VersionRef(model, f"v{number}", str(versions_dir / f"v{number}"))

    @contextmanager
    def hold_version(self, version_ref: VersionRef) -> Iterator[None]:
        """Mark the version as being written for the block (a flock on its folder).

        `fsck` reports an unfinalized version nobody holds as interrupted, one that is held as running.
        """
        fd = locks.hold(Path(self.version(version_ref.model, version_ref.version).path))
        try:
            yield
        finally:
            locks.release(fd)

    def version(self, model: str, version: str) -> VersionRef:
        """The existing `version` of `model`.

        Raises:
            InvalidName: `model` or `version` breaks the naming rules.
            ArtifactNotFound: there is no such version; the message lists the ones that exist.
        """
        path = self._model_dir(model) / "versions" / check_version(version)
        if not path.is_dir():
            existing = ", ".join(self._version_names(model)) or "none"
            raise ArtifactNotFound(
                f"model {model!r} has no version {version} in store {self.root} (existing versions: "
                f"{existing}); pick an existing version or run the pipeline to create one"
            )
        return VersionRef(model, version, str(path))

    def models(self) -> list[str]:
        """Names of the models that have a versions folder in this store, sorted."""
        return sorted(
            entry.name for entry in self.root.iterdir()
            if NAME_PATTERN.fullmatch(entry.name) and ".." not in entry.name and (entry / "versions").is_dir()
        )

    def versions(self, model: str | None = None) -> list[VersionInfo]:
        """Every version of `model` (of all models if None), sorted by model, then version number.

        An unknown model has no versions, so it yields an empty list. A damaged version record
        shows as status "corrupt" and a damaged alias file is left out; `fsck` explains both.

        Raises:
            InvalidName: `model` breaks the naming rules.
        """
        models = [check_model(model)] if model is not None else self.models()
        infos = []
        for name in models:
            aliases = aliases_by_version(self._model_dir(name) / "aliases", self.root)
            for version in self._version_names(name):
                try:
                    record = self._version_record(name, version)
                    status = record.get("status", "incomplete")
                except ArtifactCorrupt as exc:  # one damaged record must not hide the others; fsck explains
                    record, status = {"error": str(exc)}, "corrupt"
                infos.append(VersionInfo(
                    model=name,
                    version=version,
                    status=status,
                    aliases=aliases.get(version, ()),
                    record=record,
                    stages=tuple(self._committed_stages(name, version)),
                ))
        return infos

    def finalize_version(self, version_ref: VersionRef, record: dict) -> None:
        """Write the version's final record, version.json; a version is finalized only once.

        The store adds model, version, finalized_at and "stages" ({stage: manifest sha256}),
        overriding any keys of those names in `record`.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactError: `record` is not a dict with a string "status", or is not JSON-safe.
            ArtifactExists: the version is already finalized.
        """
        ref = self.version(version_ref.model, version_ref.version)
        if not isinstance(record, dict) or not isinstance(record.get("status"), str) or not record["status"]:
            raise ArtifactError(
                f"the record for model {ref.model!r} {ref.version} needs a non-empty string 'status', "
                f"e.g. {{'status': 'released'}}; got {record!r}"
            )
        version_dir = Path(ref.path)
        final = dict(to_json_safe(record, "record"))
        final.update(
            model=ref.model,
            version=ref.version,
            finalized_at=utc_now(),
            stages={
                stage: sha256_bytes((version_dir / stage / MANIFEST_NAME).read_bytes())
                for stage in self._committed_stages(ref.model, ref.version)
            },
        )
        try:
            write_new_file(version_dir / VERSION_RECORD, sealed_json(final))
        except FileExistsError as exc:
            raise ArtifactExists(
                f"model {ref.model!r} {ref.version} is already finalized ({self._relative(version_dir / VERSION_RECORD)} "
                "exists) and its record is immutable; create a new version instead"
            ) from exc
        except OSError as exc:
            raise storage_error(exc, f"writing {self._relative(version_dir / VERSION_RECORD)}") from exc

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
        ref = self.version(version_ref.model, version_ref.version)
        target = Path(ref.path) / check_stage(stage)
        label = f"stage {stage!r} of model {ref.model!r} {ref.version}"
        if (Path(ref.path) / VERSION_RECORD).exists():
            raise ArtifactExists(f"cannot write {label}: the version is finalized and takes no new stages; create a new version")
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
            read_pinned_manifest(self._stage_dir(input_ref), input_ref, self.root)
        return StageWriter(ref, stage, safe_config, dict(inputs), target, Path(ref.path) / VERSION_RECORD, self.root,
                           input_digest=input_digest, reused_from=reused_from)

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
        for version in reversed(self._version_names(model)):
            stage_dir = self._model_dir(model) / "versions" / version / check_stage(stage)
            found = reuse.candidate_manifest(stage_dir, self.root)
            if found is None or found[1].get("input_digest") != input_digest:
                continue
            ref = StageRef(model, version, stage, str(stage_dir), sha256_bytes(found[0]))
            try:
                self.verify_stage(ref)
            except ArtifactError:
                continue
            return ref
        return None

    def reuse_stage(self, version_ref: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                    source: StageRef, input_digest: str) -> StageRef:
        """Commit `stage` of a version from `source`'s verified files (hard links when possible).

        The manifest keeps the source's metrics and says `reused_from`; the files are re-hashed
        on commit like any stage's.

        Raises:
            the errors of write_stage and verify_stage.
        """
        source_dir, source_manifest = self._verified(source)
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
        ref = self.version(model, version)
        record = self._version_record(model, version)
        if not record:
            raise ArtifactNotFound(f"model {model!r} {version} is not finalized (no {VERSION_RECORD}); "
                                   "only a finished run can be used")
        for stage, manifest_sha256 in sorted(record.get("stages", {}).items()):
            self._verified(StageRef(model, version, stage, str(Path(ref.path) / stage), manifest_sha256))
        return record

    def stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        """A ref to the committed `stage` of a version, pinned to its current manifest digest.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactNotFound: the version or stage does not exist (staging folders do not count).
        """
        ref = self.version(version_ref.model, version_ref.version)
        manifest = Path(ref.path) / check_stage(stage) / MANIFEST_NAME
        if not manifest.is_file():
            committed = ", ".join(self._committed_stages(ref.model, ref.version)) or "none"
            raise ArtifactNotFound(
                f"model {ref.model!r} {ref.version} has no committed stage {stage!r} (committed stages: "
                f"{committed}); run that stage first"
            )
        return StageRef(ref.model, ref.version, stage, str(manifest.parent), sha256_bytes(manifest.read_bytes()))

    def verify_stage(self, ref: StageRef) -> Path:
        """Re-hash a committed stage against `ref`; return its folder only if every byte matches.

        Raises:
            InvalidName: a name in `ref` breaks the naming rules.
            ArtifactNotFound: the stage folder or its manifest is gone.
            ArtifactCorrupt: the manifest or a file changed, or a file is missing or extra.
        """
        return self._verified(ref)[0]

    def read_manifest(self, ref: StageRef) -> dict:
        """The manifest of a committed stage, after verifying the whole stage against `ref`.

        Raises:
            the same errors as verify_stage.
        """
        return self._verified(ref)[1]

    # -- checkpoints ------------------------------------------------------------------------

    def write_checkpoint(self, version_ref: VersionRef, stage: str, name: str) -> CheckpointWriter:
        """A context manager whose folder (`writer.dir`) becomes checkpoint `name` of `stage` on a clean exit.

        Raises:
            InvalidName: `stage` or `name` breaks the naming rules.
            ArtifactNotFound: the version does not exist.
            ArtifactExists: the version is finalized, or the checkpoint is already committed.
        """
        ref = self.version(version_ref.model, version_ref.version)
        if (Path(ref.path) / VERSION_RECORD).exists():
            raise ArtifactExists(
                f"cannot checkpoint stage {stage!r} of model {ref.model!r} {ref.version}: the version is finalized"
            )
        check_stage(name)  # checkpoint names follow the stage naming rules
        return CheckpointWriter(ref, stage, name, checkpoint_folder(ref, stage) / name)

    def checkpoints(self, version_ref: VersionRef, stage: str) -> list[CheckpointRef]:
        """The committed checkpoints of `stage` in a version, oldest first (staging folders do not count).

        Raises:
            ArtifactNotFound: the version does not exist.
        """
        return committed_checkpoints(self.version(version_ref.model, version_ref.version), stage)

    def latest_checkpoint(self, version_ref: VersionRef, stage: str) -> CheckpointRef:
        """The newest committed checkpoint of `stage` in a version.

        Raises:
            ArtifactNotFound: the version does not exist or has no committed checkpoint of `stage`.
        """
        refs = self.checkpoints(version_ref, stage)
        if not refs:
            raise ArtifactNotFound(
                f"model {version_ref.model!r} {version_ref.version} has no committed {stage} checkpoint "
                "(its training ended before the first epoch finished, or it predates checkpoints); "
                "start a fresh run instead"
            )
        return refs[-1]

    def verify_checkpoint(self, ref: CheckpointRef) -> Path:
        """Re-hash a checkpoint against `ref` and return its folder; load nothing before this passes.

        Raises:
            ArtifactCorrupt: the manifest or a file changed, or a file is missing or extra.
        """
        return verify_checkpoint_files(ref)

    # -- aliases ----------------------------------------------------------------------------

    def set_alias(self, model: str, alias: str, version: str, reason: str = "", action: str = "set",
                  actor: str | None = None) -> str | None:
        """Point `alias` of `model` at a finalized, intact `version`; return where it pointed before.

        The move is appended to the model's audit log (who, when, from, to, why, action) while
        the log's lock is held, so concurrent moves are serialized and each line's "from" is true.

        The move is appended to the model's audit log (who, when, from, to, why, action) while
        the log's lock is held, so concurrent moves are serialized and each line's "from" is true.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactNotFound: the version does not exist.
            ArtifactError: the version is not finalized yet, or the store is not writable.
            ArtifactCorrupt: a file of the version no longer matches its manifest.
            StoreFull: the store ran out of space.
        """
        check_alias(alias)
        ref = self.version(model, version)
        if not (Path(ref.path) / VERSION_RECORD).is_file():
            finalized = [v for v in self._version_names(model) if (Path(ref.path).parent / v / VERSION_RECORD).is_file()]
            raise ArtifactError(
                f"cannot point alias {alias!r} of model {model!r} at {version}: that version is not finalized "
                f"(no {VERSION_RECORD}); finalize it first or choose a finalized version "
                f"({', '.join(finalized) or 'none yet'})"
            )
        self.verify_version(model, version)
        aliases_dir = self._model_dir(model) / "aliases"
        try:
            with locked_log(self._model_dir(model) / AUDIT_FILE) as log:
                previous = write_alias(aliases_dir, model, alias, version, str(reason), self.root)
                append_line(log, {
                    "at": utc_now(), "who": actor or current_actor(), "model": model, "alias": alias,
                    "from": previous, "to": version, "why": str(reason), "action": action,
                })
        except OSError as exc:
            if exc.errno in OUT_OF_SPACE:
                raise storage_error(exc, f"moving alias {alias!r} of model {model!r}") from exc
            raise ArtifactError(
                f"cannot move alias {alias!r} of model {model!r} in {self._model_dir(model)}: "
                f"{exc.strerror or exc}; check that the store is writable"
            ) from exc
        return previous

    def audit_log(self, model: str) -> list[dict]:
        """Every alias move of `model`, oldest first.

        Raises:
            InvalidName: `model` breaks the naming rules.
            ArtifactCorrupt: a line of the log is not a JSON object.
        """
        return read_log(self._model_dir(model) / AUDIT_FILE, self.root)

    def alias(self, model: str, alias: str) -> str | None:
        """The version `alias` of `model` points at, or None if the alias was never set.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactCorrupt: the alias file is not a valid alias record.
        """
        return read_alias(self._model_dir(model) / "aliases" / f"{check_alias(alias)}.json", self.root)

    # -- gate decisions after the run ---------------------------------------------------------

    def record_decision(self, version_ref: VersionRef, record: dict) -> str:
        """Append a new gate decision to a finalized version; return its path relative to the store.

        The version's stages and version.json are not touched; decisions are numbered and write-once.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactError: the version is not finalized, or `record` is not JSON-safe.
        """
        ref = self.version(version_ref.model, version_ref.version)
        if not (Path(ref.path) / VERSION_RECORD).is_file():
            raise ArtifactError(
                f"model {ref.model!r} {ref.version} is not finalized; only a finished version can be decided again"
            )
        safe = dict(to_json_safe(record, "decision"), model=ref.model, version=ref.version, who=current_actor())
        try:
            return self._relative(append_decision(Path(ref.path), safe))
        except OSError as exc:
            raise ArtifactError(
                f"cannot record a decision for model {ref.model!r} {ref.version}: {exc.strerror or exc}; "
                "check that the store is writable"
            ) from exc

    def decisions(self, version_ref: VersionRef) -> list[dict]:
        """Later gate decisions of a version, oldest first ([] if it was never decided again).

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactCorrupt: a decision file is not valid JSON.
        """
        ref = self.version(version_ref.model, version_ref.version)
        return read_decisions(Path(ref.path), self.root)

    def version_record(self, version_ref: VersionRef) -> dict:
        """The version's final record (version.json), or {} while it is not finalized.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactCorrupt: version.json is not valid JSON.
        """
        ref = self.version(version_ref.model, version_ref.version)
        return self._version_record(ref.model, ref.version)

    def finalized_stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        """A ref to `stage` pinned to the digest recorded in version.json when the version was finalized.

        Reading through it proves the stage is still what the version's record says it was.

        Raises:
            ArtifactNotFound: the version is not finalized, or its record lists no such stage.
            ArtifactCorrupt: version.json is not valid JSON.
        """
        ref = self.version(version_ref.model, version_ref.version)
        pinned = self._version_record(ref.model, ref.version).get("stages", {})
        if not isinstance(pinned, dict) or not isinstance(pinned.get(check_stage(stage)), str):
            raise ArtifactNotFound(
                f"model {ref.model!r} {ref.version} has no finalized stage {stage!r} in its {VERSION_RECORD}; "
                "only a finished run's stages can be read this way"
            )
        return StageRef(ref.model, ref.version, stage, str(Path(ref.path) / stage), pinned[stage])

    def lineage_problems(self, ref: StageRef) -> list[str]:
        """Why `ref`'s outputs may not belong to its inputs as they are now; [] if every input matches.

        Walks the inputs recorded in each manifest, transitively: each must still be committed
        with the manifest digest that was recorded, and its files must re-hash to that manifest.
        """
        return walk_lineage(ref, self.read_manifest, lambda model, version, stage: self._stage_dir(
            StageRef(model, version, stage, "", "")))

    # -- cache ------------------------------------------------------------------------------

    def cache(self, kind: str) -> ContentCache:
        """Content-addressed results of one `kind` shared by all versions (see artifacts/cache.py)."""
        return ContentCache(self.root, check_stage(kind))

    # -- internals --------------------------------------------------------------------------

    def _model_dir(self, model: str) -> Path:
        return self.root / check_model(model)

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _version_names(self, model: str) -> list[str]:
        versions_dir = self._model_dir(model) / "versions"
        if not versions_dir.is_dir():
            return []
        names = [e.name for e in versions_dir.iterdir() if VERSION_PATTERN.fullmatch(e.name) and e.is_dir()]
        return sorted(names, key=version_number)

    def _committed_stages(self, model: str, version: str) -> list[str]:
        # Staging folders start with "." and so never match the name rules: readers skip them.
        version_dir = self._model_dir(model) / "versions" / version
        return sorted(
            entry.name for entry in version_dir.iterdir()
            if NAME_PATTERN.fullmatch(entry.name) and (entry / MANIFEST_NAME).is_file()
        )

    def _version_record(self, model: str, version: str) -> dict:
        path = self._model_dir(model) / "versions" / version / VERSION_RECORD
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        return read_sealed(data, f"version record {self._relative(path)}", REBUILD_HINT)

    def _stage_dir(self, ref: StageRef) -> Path:
        return self._model_dir(ref.model) / "versions" / check_version(ref.version) / check_stage(ref.stage)

    def _verified(self, ref: StageRef) -> tuple[Path, dict]:
        stage_dir = self._stage_dir(ref)
        data = read_pinned_manifest(stage_dir, ref, self.root)
        return stage_dir, verify_stage_files(stage_dir, ref, data, self.root)


def _prepare_root(root: Path) -> Path:
    """Create `root` if needed and prove it writable by creating and removing a probe file."""
    try:
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"{root} exists and is not a folder")
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=root)
        os.close(fd)
        Path(probe).unlink(missing_ok=True)  # a concurrent `fsck --repair` may have taken it already
    except OSError as exc:
        raise StoreNotWritable(
            f"artifact store {root.absolute()} is not writable ({exc.strerror or exc}); "
            "pass --store DIR or set QUANTGATE_STORE to a folder you can write to"
        ) from exc
    return root.resolve()
