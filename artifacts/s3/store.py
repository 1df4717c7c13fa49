"""`S3Store`: the artifact store in a bucket, with the same promises as the local one, from S3's own primitives.

Stages keep reading and writing local folders: the store's mirror (mirror.py) is a local store
folder that follows the bucket, and every public method first makes the mirror follow what it is
about to read, then lets the local code read and verify it. What a worker commits locally is
uploaded before the call returns, seal last. The promises come from the bucket alone:

- version numbers: `<model>/claims/vN` created with `If-None-Match: *` (one winner per number,
  never reused: claims are never deleted);
- stages, checkpoints, cache entries, version.json, decisions: created once, their seal last;
- alias moves: audit entry k+1 created once (moves.py), the only commit point;
- a running version: a renewed lease (lease.py) instead of a flock.

The mirror's own locks still order this worker's processes, but nothing across workers rests on them.
The run log is uploaded whole after every committed stage and when the run lets go of its version.
"""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import locks
from ..cache import ContentCache
from ..errors import ArtifactError, ArtifactExists, ArtifactNotFound
from ..layout import CHECKPOINTS_DIR, DECISIONS_DIR, RUN_LOG_FILE, VERSION_RECORD
from ..manifest import MANIFEST_NAME, read_regular, sha256_bytes
from ..names import StageRef, VersionInfo, VersionRef, check_model, check_stage, check_version, version_number
from ..paths import committed_stages
from ..store import ArtifactStore
from . import checks
from .book import EtagBook
from .cache import S3ContentCache
from .lease import Lease, lease_expired
from .listing import LEASE_FILE, ModelListing, claim_key, version_key
from .mirror import Mirror
from .objects import ObjectStore
from .releases import S3AliasesAndDecisions
from .uploads import UploadingWriter, aliases_of, claim_body

CACHE_ENV = "QUANTGATE_S3_CACHE"


def default_cache(url: str) -> Path:
    """Where this worker mirrors `url`: $QUANTGATE_S3_CACHE, else ~/.cache/quantgate/s3, one folder per store."""
    base = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "quantgate" / "s3").expanduser()
    return base / sha256_bytes(url.encode())[:16]


class S3Store(S3AliasesAndDecisions, ArtifactStore):
    """The store at `s3://BUCKET/PREFIX` (endpoint and credentials from the standard AWS settings)."""

    def __init__(self, url: str, cache_dir: str | os.PathLike | None = None):
        self.objects = ObjectStore(url)
        self.url = self.objects.url
        cache = Path(cache_dir).expanduser() if cache_dir else default_cache(self.url)
        super().__init__(cache / "store")
        self.mirror = Mirror(self.objects, self.root, EtagBook(cache / "objects.sqlite"))
        self._copy_source: str | None = None  # while reuse_stage writes its stage: the source's prefix

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    @property
    def location(self) -> str:
        return self.url

    def shown(self, relpath: str) -> str:
        return self.objects.full(relpath)

    def version_location(self, version_ref: VersionRef) -> str:
        return self.objects.full(version_key(version_ref.model, version_ref.version))

    def version_is_running(self, model: str, version: str) -> bool:
        """A fresh lease in the bucket (a run on any machine), or this worker's own flock on the mirror."""
        lease = self.objects.head(f"{version_key(model, version)}/{LEASE_FILE}")
        return (lease is not None and not lease_expired(lease.modified)) or super().version_is_running(model, version)

    # -- following the bucket ------------------------------------------------------------------

    def listing(self, model: str) -> ModelListing:
        """One LIST of the model's keys; the mirror gets a folder for every version, version.json and decisions."""
        listing = self._list(check_model(model), model)
        for version in listing.versions():
            self._follow_version(listing, version)
        return listing

    def _list(self, model: str, prefix: str) -> ModelListing:
        """The keys under the folder `prefix` of `model` (the model itself, or one of its versions), in one LIST."""
        return ModelListing(model, {item.key: item for item in self.objects.list(f"{prefix}/")})

    def _follow_version(self, listing: ModelListing, version: str) -> None:
        """The mirror's folder of `version` as the bucket holds it: its version.json and decisions, and none of
        the stages or checkpoints a killed worker committed here but never uploaded (no seal in the bucket).

        What a live process of this worker is writing (it holds the version's flock) is left alone.
        """
        base = version_key(listing.model, version)
        folder = self.mirror.local(base)
        folder.mkdir(parents=True, exist_ok=True)
        writing = locks.is_held(folder)
        self.mirror.follow(f"{base}/{VERSION_RECORD}", listing.record(version), writing)
        decisions = listing.decisions(version)
        for key, item in decisions.items():
            self.mirror.follow(key, item)
        local = folder / DECISIONS_DIR
        for path in sorted(local.glob("*.json")) if local.is_dir() else ():
            if f"{base}/{DECISIONS_DIR}/{path.name}" not in decisions:
                self.mirror.follow(f"{base}/{DECISIONS_DIR}/{path.name}", None, writing)
        if writing:
            return
        for stage in set(committed_stages(folder)) - set(listing.stages(version)):
            self.mirror.forget(f"{base}/{stage}")
        checkpoints = folder / CHECKPOINTS_DIR
        for stage_folder in sorted(checkpoints.iterdir()) if checkpoints.is_dir() else ():
            sealed = set(listing.checkpoints(version, stage_folder.name))
            for entry in sorted(stage_folder.iterdir()):
                if not entry.name.startswith(".") and entry.name not in sealed:
                    self.mirror.forget(f"{base}/{CHECKPOINTS_DIR}/{stage_folder.name}/{entry.name}")

    @contextmanager
    def _writing(self, ref: VersionRef) -> Iterator[None]:
        """Hold the version's flock (unless this process or another of this worker already does) while a stage,
        checkpoint, record or decision is written here and not yet in the bucket: `_follow_version` keeps it."""
        held = locks.hold(Path(ref.path), blocking=False)
        try:
            yield
        finally:
            locks.release(held)

    def _stage_folder(self, model: str, version: str, stage: str) -> Path:
        prefix = f"{version_key(model, version)}/{check_stage(stage)}"
        return self.mirror.hydrate_sealed(prefix, MANIFEST_NAME, f"stage {stage!r} of model {model!r} {version}")

    def _hydrate_ref(self, ref: StageRef) -> None:
        self._stage_folder(ref.model, ref.version, ref.stage)

    def _hydrate_closure(self, ref: StageRef, seen: set | None = None) -> None:
        """Mirror `ref`'s stage and, through the inputs its manifest pins, every stage it was made from."""
        seen = set() if seen is None else seen
        if (ref.model, ref.version, ref.stage) in seen:
            return
        seen.add((ref.model, ref.version, ref.stage))
        self._hydrate_ref(ref)
        try:
            inputs = super().read_manifest(ref)["inputs"]
        except ArtifactError:
            return  # the local verification names the damage when the caller reads
        for pin in inputs.values():
            self._hydrate_closure(StageRef(pin["model"], pin["version"], pin["stage"], "", pin["manifest_sha256"]),
                                  seen)

    def _hydrate_version(self, model: str, version: str) -> dict:
        """Mirror a finalized version whole (every stage its record pins, and their inputs); its record."""
        record = super().version_record(self.version(model, version))
        for stage, sha in sorted(record.get("stages", {}).items()):
            try:
                self._hydrate_closure(StageRef(model, version, stage, "", sha))
            except ArtifactNotFound:
                continue  # the local verification reports the missing stage
        return record

    # -- versions ------------------------------------------------------------------------------

    def create_version(self, model: str) -> VersionRef:
        listing = self.listing(model)
        number = max(map(version_number, listing.versions()), default=0) + 1
        while not self.mirror.put_new(claim_key(model, f"v{number}"), claim_body(model, f"v{number}")):
            number += 1  # another worker claimed it first
        folder = self.mirror.local(version_key(model, f"v{number}"))
        folder.mkdir(parents=True, exist_ok=True)
        return VersionRef(model, f"v{number}", str(folder))

    @contextmanager
    def hold_version(self, version_ref: VersionRef) -> Iterator[None]:
        lease = Lease(self.objects, f"{version_key(version_ref.model, version_ref.version)}/{LEASE_FILE}")
        lease.start()
        try:
            with super().hold_version(version_ref):
                yield
        finally:
            lease.stop()
            self._upload_run_log(version_ref)

    def version(self, model: str, version: str) -> VersionRef:
        """One version's keys only (a model's whole listing grows with its history), unless it is unknown."""
        check_model(model)
        check_version(version)
        base = version_key(model, version)
        listing = self._list(model, base)
        if listing.objects or self.objects.head(claim_key(model, version)) is not None:
            self._follow_version(listing, version)
        else:
            self.listing(model)  # unknown: the error lists the versions there are
        return super().version(model, version)

    def models(self) -> list[str]:
        return [name for name in self.objects.list_dirs("") if _is_model(name)
                and self.objects.list_dirs(f"{name}/")]

    def versions(self, model: str | None = None) -> list[VersionInfo]:
        models = [check_model(model)] if model is not None else self.models()
        infos = []
        for name in models:
            listing = self.listing(name)
            by_version = aliases_of(self.audit_entries(name, listing))
            for info in super().versions(name):
                finalized = listing.record(info.version) is not None  # in the bucket, not only in this mirror
                infos.append(VersionInfo(info.model, info.version, info.status if finalized else "incomplete",
                                         by_version.get(info.version, ()), info.record if finalized else {},
                                         tuple(listing.stages(info.version))))
        return infos

    def finalize_version(self, version_ref: VersionRef, record: dict) -> None:
        ref = self.version(version_ref.model, version_ref.version)
        path = Path(ref.path) / VERSION_RECORD
        key = f"{version_key(ref.model, ref.version)}/{VERSION_RECORD}"
        with self._writing(ref):
            super().finalize_version(ref, record)
            try:
                created = self.mirror.put_new(key, read_regular(path))
            except BaseException:
                path.unlink(missing_ok=True)  # not finalized until the bucket holds it
                raise
        if not created:
            path.unlink(missing_ok=True)
            raise ArtifactExists(f"model {ref.model!r} {ref.version} is already finalized in {self.objects.full(key)} "
                                 "and its record is immutable; create a new version instead")
        self._upload_run_log(ref)

    def version_record(self, version_ref: VersionRef) -> dict:
        return super().version_record(self.version(version_ref.model, version_ref.version))

    def append_run_log(self, version_ref: VersionRef, text: str) -> None:
        ref = super().version(version_ref.model, version_ref.version)
        super().append_run_log(ref, text)
        self._upload_run_log(ref)

    def _upload_run_log(self, ref: VersionRef) -> None:
        path = self.run_log_path(ref)
        if path.is_file():
            key = f"{version_key(ref.model, ref.version)}/{RUN_LOG_FILE}"
            self.objects.upload_file(path, key)

    # -- stages --------------------------------------------------------------------------------

    def write_stage(self, version_ref: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                    input_digest: str | None = None, reused_from: dict | None = None):
        for ref in inputs.values() if isinstance(inputs, dict) else ():
            if isinstance(ref, StageRef):
                self._hydrate_ref(ref)
        ref = self.version(version_ref.model, version_ref.version)
        prefix = f"{version_key(ref.model, ref.version)}/{check_stage(stage)}"
        if self.objects.head(f"{prefix}/{MANIFEST_NAME}") is not None:
            raise ArtifactExists(f"stage {stage!r} of model {ref.model!r} {ref.version} is already committed in "
                                 f"{self.objects.full(prefix)} and immutable; write this run into a new version")
        writer = super().write_stage(ref, stage, config, inputs, input_digest, reused_from)
        copy_from = self._copy_source
        return UploadingWriter(writer, lambda folder: self._upload_stage(ref, folder, prefix, stage, copy_from),
                               self._writing(ref))

    def _upload_stage(self, ref: VersionRef, folder: Path, prefix: str, stage: str, copy_from: str | None) -> None:
        self.mirror.upload_sealed(folder, prefix, MANIFEST_NAME, f"stage {stage!r} of model {ref.model!r} {ref.version}",
                                  copy_from)
        self._upload_run_log(ref)

    def find_reusable(self, model: str, stage: str, input_digest: str) -> StageRef | None:
        listing = self.listing(model)
        for version in reversed(listing.versions()):
            if stage not in listing.stages(version):
                continue
            key = f"{version_key(model, version)}/{stage}/{MANIFEST_NAME}"
            data = self.objects.get(key)
            try:
                recorded = json.loads(data).get("input_digest") if data is not None else None
            except (ValueError, AttributeError):
                continue  # not a manifest: fsck reports it, it is never reused
            if recorded != input_digest:
                continue
            ref = StageRef(model, version, stage, str(self.mirror.local(key).parent), sha256_bytes(data))
            try:
                self.verify_stage(ref)
            except ArtifactError:
                continue  # damaged candidates are skipped (fsck reports them), never reused
            return ref
        return None

    def reuse_stage(self, version_ref: VersionRef, stage: str, config: dict, inputs: dict[str, StageRef],
                    source: StageRef, input_digest: str) -> StageRef:
        """As on disk (hard links in the mirror), and in the bucket the files are copied server-side from the
        source's verified objects: a reused stage uploads its manifest, not its bytes."""
        self._hydrate_ref(source)
        self._copy_source = f"{version_key(source.model, source.version)}/{check_stage(source.stage)}"
        try:
            return super().reuse_stage(version_ref, stage, config, inputs, source, input_digest)
        finally:
            self._copy_source = None

    def verify_version(self, model: str, version: str) -> dict:
        self._hydrate_version(model, version)
        return super().verify_version(model, version)

    def stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        ref = self.version(version_ref.model, version_ref.version)
        try:
            self._stage_folder(ref.model, ref.version, stage)
        except ArtifactNotFound as exc:
            listing = self._list(ref.model, version_key(ref.model, ref.version))
            committed = ", ".join(listing.stages(ref.version)) or "none"
            raise ArtifactNotFound(f"model {ref.model!r} {ref.version} has no committed stage {stage!r} in {self.url} "
                                   f"(committed stages: {committed}); run that stage first") from exc
        return super().stage_ref(ref, stage)

    def finalized_stage_ref(self, version_ref: VersionRef, stage: str) -> StageRef:
        return super().finalized_stage_ref(self.version(version_ref.model, version_ref.version), stage)

    def verify_stage(self, ref: StageRef) -> Path:
        self._hydrate_ref(ref)
        return super().verify_stage(ref)

    def read_manifest(self, ref: StageRef) -> dict:
        self._hydrate_ref(ref)
        return super().read_manifest(ref)

    # -- checkpoints ---------------------------------------------------------------------------

    def write_checkpoint(self, version_ref: VersionRef, stage: str, name: str):
        ref = super().version(version_ref.model, version_ref.version)
        writer = super().write_checkpoint(ref, stage, name)
        prefix = f"{version_key(ref.model, ref.version)}/{CHECKPOINTS_DIR}/{check_stage(stage)}/{name}"
        label = f"checkpoint {name!r} of stage {stage!r} of model {ref.model!r} {ref.version}"
        return UploadingWriter(writer, lambda folder: self.mirror.upload_sealed(folder, prefix, MANIFEST_NAME, label),
                               self._writing(ref))

    def checkpoints(self, version_ref: VersionRef, stage: str):
        listing = self.listing(version_ref.model)
        ref = super().version(version_ref.model, version_ref.version)
        for name in listing.checkpoints(ref.version, check_stage(stage)):
            prefix = f"{version_key(ref.model, ref.version)}/{CHECKPOINTS_DIR}/{stage}/{name}"
            self.mirror.hydrate_sealed(prefix, MANIFEST_NAME, f"checkpoint {name!r}", listing.under(prefix))
        return super().checkpoints(ref, stage)

    def latest_checkpoint(self, version_ref: VersionRef, stage: str):
        self.checkpoints(version_ref, stage)
        return super().latest_checkpoint(super().version(version_ref.model, version_ref.version), stage)

    # -- fsck ----------------------------------------------------------------------------------

    def remote_problems(self, model: str | None = None) -> list:
        return checks.remote_problems(self, model)

    def repair_remote(self, problem) -> bool:
        return checks.repair_remote(self, problem)

    # -- cache ---------------------------------------------------------------------------------

    def cache(self, kind: str, salt: str = "") -> ContentCache:
        return S3ContentCache(self.root, check_stage(kind), salt, self.mirror)


def _is_model(name: str) -> bool:
    try:
        check_model(name)
    except ArtifactError:
        return False
    return True
