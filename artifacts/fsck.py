"""`fsck` for the artifact store: find every problem, and remove only what crashes left behind.

Problems are errors (the store holds something it should not, or misses something it should)
or warnings (an interrupted version: no version.json and no process holds it; its committed
stages are intact and reusable, it can never be aliased, and it is kept). Repair removes
orphans only: staging folders and temporary files that no live process holds a lock on.
It never deletes or rewrites a committed stage, a version record, an alias or a version.
"""

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from . import locks, paths
from .checkpoints import CheckpointRef, verify_checkpoint_files
from .errors import ArtifactCorrupt, ArtifactError
from .layout import (
    ALIASES_DIR,
    AUDIT_FILE,
    CHECKPOINTS_DIR,
    DECISIONS_DIR,
    RELEASE,
    RUN_LOG_FILE,
    VERSION_RECORD,
    VERSIONS_DIR,
)
from .manifest import MANIFEST_NAME, TEMP_SUFFIX, read_sealed, sha256_bytes
from .names import NAME_PATTERN, VERSION_PATTERN, StageRef, check_model
from .store import ArtifactStore
from .writer import STAGING_PREFIX


@dataclass(frozen=True)
class Problem:
    """One finding; `path` is relative to the store root."""

    kind: str
    path: str
    message: str
    severity: str = "error"  # or "warning"
    repairable: bool = False

    def describe(self) -> str:
        return f"{self.severity:<7} {self.kind:<18} {self.path}: {self.message}"


def check_store(store: ArtifactStore, model: str | None = None) -> list[Problem]:
    """Every problem in the store (or in one model), in a stable order."""
    root = store.root
    models = [check_model(model)] if model else sorted(
        entry.name for entry in root.iterdir() if entry.is_dir() and NAME_PATTERN.fullmatch(entry.name)
    )
    problems: list[Problem] = []
    if not model:  # the writability probe a crashed ArtifactStore() may leave at the root
        for probe in sorted(root.glob(".write-probe-*")):
            problems += _orphan(store, probe, "orphan-temp")
    for name in models:
        problems += _check_versions(store, name)
        problems += _check_aliases(store, name)
        problems += _check_audit_log(store, name)
    return problems


def repair(store: ArtifactStore, problems: list[Problem]) -> list[str]:
    """Remove the orphans among `problems` (only those, and only while nobody holds them); return their paths."""
    removed = []
    for problem in problems:
        if not problem.repairable:
            continue
        path = store.root / problem.path
        fd = locks.hold(path, blocking=False) if path.exists() else None
        if fd is None:
            continue  # gone already, or a live process picked it up again
        try:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        finally:
            locks.release(fd)
        removed.append(problem.path)
    return removed


def _rel(store: ArtifactStore, path: Path) -> str:
    return path.relative_to(store.root).as_posix()


def _orphan(store: ArtifactStore, path: Path, kind: str) -> list[Problem]:
    if locks.is_held(path):
        return []  # a live process is writing it
    return [Problem(kind, _rel(store, path), "left behind by an interrupted run; `fsck --repair` removes it",
                    repairable=True)]


def _check_versions(store: ArtifactStore, model: str) -> list[Problem]:
    # fsck walks what is on disk, names the rules would refuse included, so it joins without validating.
    folder = store.root / model / VERSIONS_DIR
    if not folder.is_dir():
        return []
    problems = []
    for entry in sorted(folder.iterdir()):
        if not (entry.is_dir() and VERSION_PATTERN.fullmatch(entry.name)):
            problems.append(Problem("unexpected-entry", _rel(store, entry), "not a version folder (v1, v2, ...)"))
            continue
        problems += _check_version(store, model, entry)
    return problems


def _check_version(store: ArtifactStore, model: str, version_dir: Path) -> list[Problem]:
    problems, manifests = [], {}
    for entry in sorted(version_dir.iterdir()):
        if entry.name.startswith(STAGING_PREFIX) and entry.is_dir():
            problems += _orphan(store, entry, "orphan-staging")
        elif entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX) and entry.is_file():
            problems += _orphan(store, entry, "orphan-temp")
        elif entry.name == VERSION_RECORD and entry.is_file():
            continue
        elif entry.name == RUN_LOG_FILE:
            problems += _check_run_log(store, entry)
        elif entry.name == CHECKPOINTS_DIR and entry.is_dir() and not entry.is_symlink():
            problems += _check_checkpoints(store, model, version_dir.name, entry)
        elif entry.name == DECISIONS_DIR and entry.is_dir() and not entry.is_symlink():
            problems += _check_decisions(store, entry)
        elif entry.is_dir() and not entry.is_symlink() and NAME_PATTERN.fullmatch(entry.name):
            stage_problems, digest = _check_stage(store, model, version_dir.name, entry)
            problems += stage_problems
            if digest:
                manifests[entry.name] = digest
        else:
            problems.append(Problem("unexpected-entry", _rel(store, entry), "not a stage, record or store file"))
    problems += _check_record(store, model, version_dir, manifests)
    problems += _check_input_links(store, version_dir, manifests)
    return problems


def _check_run_log(store: ArtifactStore, path: Path) -> list[Problem]:
    # lstat: a symlink is judged as a link, never by what it points at; the store never writes through one.
    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        return []  # informational and unhashed: any content is fine
    found = "a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    return [Problem("bad-run-log", _rel(store, path),
                    f"the run log must be a regular file, found {found}; move it aside (runs append to a new one)")]


def _check_checkpoints(store: ArtifactStore, model: str, version: str, folder: Path) -> list[Problem]:
    problems = []
    for stage_dir in sorted(folder.iterdir()):
        if not (stage_dir.is_dir() and NAME_PATTERN.fullmatch(stage_dir.name)):
            problems.append(Problem("unexpected-entry", _rel(store, stage_dir), "not a stage's checkpoint folder"))
            continue
        for entry in sorted(stage_dir.iterdir()):
            manifest = entry / MANIFEST_NAME
            if entry.name.startswith(STAGING_PREFIX) and entry.is_dir():
                problems += _orphan(store, entry, "orphan-staging")
            elif entry.is_dir() and NAME_PATTERN.fullmatch(entry.name) and manifest.is_file():
                ref = CheckpointRef(model, version, stage_dir.name, entry.name, str(entry),
                                    sha256_bytes(manifest.read_bytes()))
                try:
                    verify_checkpoint_files(ref)
                except (ArtifactError, ValueError, KeyError, TypeError) as exc:
                    problems.append(Problem("corrupt-checkpoint", _rel(store, entry), str(exc)))
            else:
                problems.append(Problem("unexpected-entry", _rel(store, entry), "not a committed checkpoint"))
    return problems


def _check_decisions(store: ArtifactStore, folder: Path) -> list[Problem]:
    problems = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX) and entry.is_file():
            problems += _orphan(store, entry, "orphan-temp")
        elif entry.suffix == ".json" and entry.stem.isdigit() and entry.is_file():
            try:
                read_sealed(entry.read_bytes(), f"decision {_rel(store, entry)}", "")
            except ArtifactError as exc:
                problems.append(Problem("malformed-decision", _rel(store, entry), str(exc).rstrip("; ")))
        else:
            problems.append(Problem("unexpected-entry", _rel(store, entry), "not a numbered decision record"))
    return problems


def _check_stage(store: ArtifactStore, model: str, version: str, stage_dir: Path) -> tuple[list[Problem], str | None]:
    manifest_path = stage_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        return [Problem("missing-manifest", _rel(store, stage_dir), f"stage folder without {MANIFEST_NAME}")], None
    data = manifest_path.read_bytes()
    digest = sha256_bytes(data)
    try:
        store.verify_stage(StageRef(model, version, stage_dir.name, str(stage_dir), digest))
    except ArtifactCorrupt as exc:
        return [Problem(exc.kind, _rel(store, stage_dir), str(exc))], digest
    return [], digest


def _check_record(store: ArtifactStore, model: str, version_dir: Path, manifests: dict[str, str]) -> list[Problem]:
    record_path = version_dir / VERSION_RECORD
    if not record_path.is_file():
        if locks.is_held(version_dir):
            return []  # a run is writing this version right now
        return [Problem("incomplete-version", _rel(store, version_dir),
                        f"no {VERSION_RECORD}: the run was interrupted; its committed stages stay reusable, "
                        "it can never be aliased, and it is kept", severity="warning")]
    try:
        record = read_sealed(record_path.read_bytes(), f"version record {_rel(store, record_path)}", "")
    except ArtifactError as exc:
        return [Problem("malformed-record", _rel(store, record_path), str(exc).rstrip("; "))]
    listed = record.get("stages")
    if not isinstance(listed, dict):
        return [Problem("malformed-record", _rel(store, record_path), "has no 'stages' map")]
    problems = []
    for stage in sorted(set(listed) | set(manifests)):
        if stage not in manifests:
            problems.append(Problem("missing-stage", f"{_rel(store, version_dir)}/{stage}",
                                    f"listed in {VERSION_RECORD} but not in the store"))
        elif stage not in listed:
            problems.append(Problem("unrecorded-stage", f"{_rel(store, version_dir)}/{stage}",
                                    f"committed but not listed in {VERSION_RECORD}"))
        elif listed[stage] != manifests[stage]:
            problems.append(Problem("hash-mismatch", f"{_rel(store, version_dir)}/{stage}/{MANIFEST_NAME}",
                                    f"sha256 {manifests[stage]}, but {VERSION_RECORD} pinned {listed[stage]}"))
    return problems


def _check_input_links(store: ArtifactStore, version_dir: Path, manifests: dict[str, str]) -> list[Problem]:
    problems = []
    for stage in manifests:
        try:
            inputs = read_sealed((version_dir / stage / MANIFEST_NAME).read_bytes(), stage, "")["inputs"]
        except (ArtifactError, KeyError):
            continue  # already reported as malformed
        for name, pin in sorted(inputs.items()):
            try:
                upstream = paths.stage_dir(store.root, pin["model"], pin["version"], pin["stage"]) / MANIFEST_NAME
            except ArtifactError:
                upstream = None  # a pin naming no valid stage can only be broken
            actual = sha256_bytes(upstream.read_bytes()) if upstream is not None and upstream.is_file() else None
            if actual != pin["manifest_sha256"]:
                problems.append(Problem("broken-input", f"{_rel(store, version_dir)}/{stage}",
                                        f"input {name!r} ({pin['version']}/{pin['stage']}) "
                                        f"{'is missing' if actual is None else 'changed since this stage read it'}"))
    return problems


def _check_audit_log(store: ArtifactStore, model: str) -> list[Problem]:
    try:
        store.audit_log(model)
    except ArtifactError as exc:
        return [Problem("malformed-audit-log", f"{model}/{AUDIT_FILE}", str(exc))]
    return []


def _check_aliases(store: ArtifactStore, model: str) -> list[Problem]:
    folder = store.root / model / ALIASES_DIR
    if not folder.is_dir():
        return []
    problems = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX):
            problems += _orphan(store, entry, "orphan-temp")
        elif entry.suffix == ".json" and NAME_PATTERN.fullmatch(entry.stem) and ".." not in entry.stem:
            problems += _check_alias(store, model, entry)
        # Anything else (the lock file, logs other features keep) is not the alias files' business.
    return problems


def _check_alias(store: ArtifactStore, model: str, path: Path) -> list[Problem]:
    shown = _rel(store, path)
    try:
        version = store.alias(model, path.stem)
    except ArtifactError as exc:
        return [Problem("malformed-alias", shown, str(exc))]
    folder = store.root / model / VERSIONS_DIR / version
    if not folder.is_dir():
        return [Problem("dangling-alias", shown, f"points at {version}, which does not exist; "
                        "point it at an existing version")]
    record_path = folder / VERSION_RECORD
    if not record_path.is_file():
        return [Problem("dangling-alias", shown, f"points at {version}, which was never finalized")]
    try:
        status = read_sealed(record_path.read_bytes(), shown, "").get("status")
    except ArtifactError:
        return []  # the record itself is reported under the version
    if path.stem == RELEASE and status != "passed":
        return [Problem("release-not-passed", shown, f"points at {version}, whose status is {status!r}, not 'passed'")]
    return []

