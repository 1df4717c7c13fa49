"""Reading committed stages: refs pinned to a manifest digest, and the checks before any read.

Nothing is handed out unverified: a stage is read only through a StageRef, and every read
re-hashes the manifest against the ref and every file against the manifest (see verify.py).
"""

from pathlib import Path

from . import reuse
from .errors import ArtifactError, ArtifactNotFound
from .layout import VERSION_RECORD
from .manifest import MANIFEST_NAME, sha256_bytes
from .names import StageRef, VersionRef, check_stage
from .paths import committed_stages, stage_dir, version_dir, version_names
from .verify import read_pinned_manifest, verify_stage_files
from .versions import read_version_record


def verified_stage(root: Path, ref: StageRef) -> tuple[Path, dict]:
    """The folder and manifest of the stage `ref` pins, once every byte matches.

    Raises:
        the errors of ArtifactStore.verify_stage.
    """
    folder = stage_dir(root, ref.model, ref.version, ref.stage)
    data = read_pinned_manifest(folder, ref, root)
    return folder, verify_stage_files(folder, ref, data, root)


def current_stage_ref(ref: VersionRef, stage: str) -> StageRef:
    """A ref to the committed `stage` of the existing version `ref`; see ArtifactStore.stage_ref."""
    manifest = Path(ref.path) / check_stage(stage) / MANIFEST_NAME
    if not manifest.is_file():
        committed = ", ".join(committed_stages(Path(ref.path))) or "none"
        raise ArtifactNotFound(
            f"model {ref.model!r} {ref.version} has no committed stage {stage!r} (committed stages: "
            f"{committed}); run that stage first"
        )
    return StageRef(ref.model, ref.version, stage, str(manifest.parent), sha256_bytes(manifest.read_bytes()))


def finalized_stage_ref(root: Path, ref: VersionRef, stage: str) -> StageRef:
    """A ref to `stage` pinned by the existing version's record; see ArtifactStore.finalized_stage_ref."""
    pinned = read_version_record(root, ref.model, ref.version).get("stages", {})
    if not isinstance(pinned, dict) or not isinstance(pinned.get(check_stage(stage)), str):
        raise ArtifactNotFound(
            f"model {ref.model!r} {ref.version} has no finalized stage {stage!r} in its {VERSION_RECORD}; "
            "only a finished run's stages can be read this way"
        )
    return StageRef(ref.model, ref.version, stage, str(Path(ref.path) / stage), pinned[stage])


def verify_finalized_version(root: Path, ref: VersionRef) -> dict:
    """Check the existing version's record and every stage it pins; see ArtifactStore.verify_version."""
    record = read_version_record(root, ref.model, ref.version)
    if not record:
        raise ArtifactNotFound(f"model {ref.model!r} {ref.version} is not finalized (no {VERSION_RECORD}); "
                               "only a finished run can be used")
    for stage, manifest_sha256 in sorted(record.get("stages", {}).items()):
        verified_stage(root, StageRef(ref.model, ref.version, stage, str(Path(ref.path) / stage), manifest_sha256))
    return record


def find_reusable(root: Path, model: str, stage: str, input_digest: str) -> StageRef | None:
    """The newest intact committed `stage` of `model` with this input digest; see ArtifactStore.find_reusable."""
    for version in reversed(version_names(root, model)):
        folder = version_dir(root, model, version) / check_stage(stage)
        found = reuse.candidate_manifest(folder, root)
        if found is None or found[1].get("input_digest") != input_digest:
            continue
        ref = StageRef(model, version, stage, str(folder), sha256_bytes(found[0]))
        try:
            verified_stage(root, ref)
        except ArtifactError:
            continue
        return ref
    return None
