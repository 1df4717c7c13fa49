"""`fsck` for the artifact store: find every problem, and remove only what crashes left behind.

Problems are errors (the store holds something it should not, or misses something it should)
or warnings (an interrupted version: no version.json and no process holds it; its committed
stages are intact and reusable, it can never be aliased, and it is kept). Repair removes
orphans only: staging folders, temporary files, set-aside cache entries and lock files that no
live process holds, plus a torn last line of an audit log (never committed, see audit.py).
It never deletes or rewrites a committed stage, a version record, an alias or a version.

fsck never follows a symlink and never opens a FIFO, socket or device (see fsck_entries.py):
each is named as a `special-file` error and left alone.
"""

import os
import stat
from pathlib import Path

from . import paths
from .aliases import committed_moves, current_target
from .audit import torn_tail, truncate_torn_tail
from .cache import CACHE_DIR
from .checkpoints import LEGACY_CHECKPOINT, CheckpointRef, verify_checkpoint_files
from .decisions import effective_verdict, read_decisions
from .errors import ArtifactCorrupt, ArtifactError
from .fsck_entries import (
    Entry,
    Problem,
    check_cache,
    lstat_mode,
    orphan,
    rel,
    remove_orphan,
    scan,
    special,
    split_lock_files,
)
from .holders import leftover_problems
from .layout import (
    ALIASES_DIR,
    AUDIT_FILE,
    CHECKPOINTS_DIR,
    DECISIONS_DIR,
    NEXT_VERSION_FILE,
    PROBE_PREFIX,
    RELEASE,
    RUN_LOG_FILE,
    VERSION_RECORD,
    VERSIONS_DIR,
)
from .manifest import MANIFEST_NAME, TEMP_SUFFIX, entry_kind, read_regular, read_sealed, sha256_bytes
from .names import NAME_PATTERN, VERSION_PATTERN, StageRef, VersionRef, check_model
from .reading import verify_finalized_version
from .store import ArtifactStore
from .writer import STAGING_PREFIX

__all__ = ["Problem", "check_store", "repair"]


def check_store(store: ArtifactStore, model: str | None = None) -> list[Problem]:
    """Every problem in the store (or in one model), in a stable order."""
    root = store.root
    problems: list[Problem] = store.remote_problems(model)  # a bucket's own findings; it fills the mirror too
    if model:
        models = [Entry(root / check_model(model), lstat_mode(root / model) or stat.S_IFDIR)]
    else:
        entries, found = split_lock_files(root, scan(root))
        problems += found
        models = [e for e in entries if NAME_PATTERN.fullmatch(e.name) and ".." not in e.name]
        for entry in entries:  # the writability probe a crashed ArtifactStore() may leave at the root
            if entry.name.startswith(PROBE_PREFIX):
                problems += [special(root, entry)] if entry.is_special else orphan(root, entry.path, "orphan-temp")
            elif entry.name == CACHE_DIR and entry.is_special:
                problems.append(special(root, entry))
        problems += check_cache(root)
    for entry in models:
        if entry.is_special:
            problems.append(special(root, entry))
        elif entry.is_dir:
            problems += _check_model(store, entry.name)
    return problems


def repair(store: ArtifactStore, problems: list[Problem]) -> list[str]:
    """Remove the orphans among `problems` (only those, and only while nobody holds them), cut torn
    audit lines; return the paths repaired."""
    repaired = []
    for problem in problems:
        if not problem.repairable:
            continue
        path = store.root / problem.path
        if store.repair_remote(problem):
            repaired.append(problem.path)
            continue
        if problem.kind == "torn-audit-line":
            done = truncate_torn_tail(path) is not None
        else:
            done = remove_orphan(path)
        if done:
            repaired.append(problem.path)
    return repaired


def _check_model(store: ArtifactStore, model: str) -> list[Problem]:
    root, folder = store.root, store.root / model
    problems = []
    for entry in scan(folder):
        if entry.name in (VERSIONS_DIR, ALIASES_DIR) and not entry.is_dir:
            problems.append(special(root, entry) if entry.is_special else
                            Problem("unexpected-entry", rel(root, entry.path), "must be a folder"))
        elif entry.name in (AUDIT_FILE, NEXT_VERSION_FILE) and entry.is_special:
            problems.append(special(root, entry))
        # Anything else at the model level belongs to no check: fsck says nothing about it.
    if stat.S_ISDIR(lstat_mode(folder / VERSIONS_DIR) or 0):
        problems += _check_versions(store, model)
    if stat.S_ISDIR(lstat_mode(folder / ALIASES_DIR) or 0):
        problems += _check_aliases(store, model)
    if stat.S_ISREG(lstat_mode(folder / AUDIT_FILE) or 0):
        problems += _check_audit_log(store, model)
    return problems


def _check_versions(store: ArtifactStore, model: str) -> list[Problem]:
    # fsck walks what is on disk, names the rules would refuse included, so it joins without validating.
    root = store.root
    entries, problems = split_lock_files(root, scan(root / model / VERSIONS_DIR))
    for entry in entries:
        if entry.is_special:
            problems.append(special(root, entry))
        elif not (entry.is_dir and VERSION_PATTERN.fullmatch(entry.name)):
            problems.append(Problem("unexpected-entry", rel(root, entry.path), "not a version folder (v1, v2, ...)"))
        else:
            problems += _check_version(store, model, entry.path)
    return problems


def _check_version(store: ArtifactStore, model: str, version_dir: Path) -> list[Problem]:
    root = store.root
    entries, problems = split_lock_files(root, scan(version_dir))
    manifests = {}
    for entry in entries:
        if entry.name == RUN_LOG_FILE:
            problems += _check_run_log(store, entry)
        elif entry.is_special:
            problems.append(special(root, entry))
        elif entry.name.startswith(STAGING_PREFIX) and entry.is_dir:
            problems += orphan(root, entry.path, "orphan-staging")
        elif entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX) and entry.is_file:
            problems += orphan(root, entry.path, "orphan-temp")
        elif entry.name == VERSION_RECORD and entry.is_file:
            continue
        elif entry.name == CHECKPOINTS_DIR and entry.is_dir:
            problems += _check_checkpoints(store, model, version_dir.name, entry.path)
        elif entry.name == DECISIONS_DIR and entry.is_dir:
            problems += _check_decisions(store, entry.path)
        elif entry.is_dir and NAME_PATTERN.fullmatch(entry.name):
            stage_problems, digest = _check_stage(store, model, version_dir.name, entry.path)
            problems += stage_problems
            if digest:
                manifests[entry.name] = digest
        else:
            problems.append(Problem("unexpected-entry", rel(root, entry.path), "not a stage, record or store file"))
    problems += _check_record(store, model, version_dir, manifests)
    problems += _check_input_links(store, version_dir, manifests)
    return problems


def _check_run_log(store: ArtifactStore, entry: Entry) -> list[Problem]:
    # lstat: a symlink is judged as a link, never by what it points at; the store never writes through one.
    if entry.is_file:
        return []  # informational and unhashed: any content is fine
    return [Problem("bad-run-log", rel(store.root, entry.path),
                    f"the run log must be a regular file, found {entry_kind(entry.mode)}; move it aside "
                    "(runs append to a new one)")]


def _check_checkpoints(store: ArtifactStore, model: str, version: str, folder: Path) -> list[Problem]:
    root = store.root
    problems = []
    for stage_dir in scan(folder):
        if stage_dir.is_special:
            problems.append(special(root, stage_dir))
            continue
        if not (stage_dir.is_dir and NAME_PATTERN.fullmatch(stage_dir.name)):
            problems.append(Problem("unexpected-entry", rel(root, stage_dir.path), "not a stage's checkpoint folder"))
            continue
        entries, found = split_lock_files(root, scan(stage_dir.path))
        problems += found
        for entry in entries:
            manifest = entry.path / MANIFEST_NAME
            if entry.is_special:
                problems.append(special(root, entry))
            elif entry.name.startswith(STAGING_PREFIX) and entry.is_dir:
                problems += orphan(root, entry.path, "orphan-staging")
            elif entry.is_dir and NAME_PATTERN.fullmatch(entry.name) and stat.S_ISREG(lstat_mode(manifest) or 0):
                try:
                    ref = CheckpointRef(model, version, stage_dir.name, entry.name, str(entry.path),
                                        sha256_bytes(read_regular(manifest)))
                    verify_checkpoint_files(ref)
                except ArtifactCorrupt as exc:
                    problems.append(legacy_or_corrupt(root, entry.path, exc))
                except (ArtifactError, OSError, ValueError, KeyError, TypeError) as exc:
                    problems.append(Problem("corrupt-checkpoint", rel(root, entry.path), str(exc)))
            else:
                problems.append(Problem("unexpected-entry", rel(root, entry.path), "not a committed checkpoint"))
    return problems


def _check_decisions(store: ArtifactStore, folder: Path) -> list[Problem]:
    root = store.root
    entries, problems = split_lock_files(root, scan(folder))
    for entry in entries:
        if entry.is_special:
            problems.append(special(root, entry))
        elif entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX) and entry.is_file:
            problems += orphan(root, entry.path, "orphan-temp")
        elif entry.path.suffix == ".json" and entry.path.stem.isdigit() and entry.is_file:
            try:
                read_sealed(read_regular(entry.path), f"decision {rel(root, entry.path)}", "")
            except (ArtifactError, OSError) as exc:
                problems.append(Problem("malformed-decision", rel(root, entry.path), str(exc).rstrip("; ")))
        else:
            problems.append(Problem("unexpected-entry", rel(root, entry.path), "not a numbered decision record"))
    return problems


def _check_stage(store: ArtifactStore, model: str, version: str, stage_dir: Path) -> tuple[list[Problem], str | None]:
    manifest_path = stage_dir / MANIFEST_NAME
    mode = lstat_mode(manifest_path)
    if mode is None:
        return [Problem("missing-manifest", rel(store.root, stage_dir), f"stage folder without {MANIFEST_NAME}")], None
    if not stat.S_ISREG(mode):
        return [special(store.root, Entry(manifest_path, mode))], None
    try:
        digest = sha256_bytes(read_regular(manifest_path))
        store.verify_stage(StageRef(model, version, stage_dir.name, str(stage_dir), digest))
    except ArtifactCorrupt as exc:
        return [Problem(exc.kind, rel(store.root, stage_dir), str(exc))], digest
    except (ArtifactError, OSError) as exc:  # vanished or unreadable while we looked
        return [Problem("missing-manifest", rel(store.root, stage_dir), str(exc))], None
    return [], digest


def _read_record(path: Path, shown: str) -> dict:
    """The sealed record at `path`; ArtifactError if it is not a regular file or not sealed."""
    try:
        data = read_regular(path)
    except OSError as exc:
        raise ArtifactCorrupt(f"{shown} is {entry_kind(lstat_mode(path) or 0)}, not a record file") from exc
    return read_sealed(data, shown, "")


def _check_record(store: ArtifactStore, model: str, version_dir: Path, manifests: dict[str, str]) -> list[Problem]:
    root, record_path = store.root, version_dir / VERSION_RECORD
    if lstat_mode(record_path) is None:
        if store.version_is_running(model, version_dir.name):
            return leftover_problems(root, version_dir)  # none while the run writing it lives
        return [Problem("incomplete-version", rel(root, version_dir),
                        f"no {VERSION_RECORD}: the run was interrupted; its committed stages stay reusable, "
                        "it can never be aliased, and it is kept", severity="warning")]
    try:
        record = _read_record(record_path, f"version record {rel(root, record_path)}")
    except ArtifactError as exc:
        return [Problem("malformed-record", rel(root, record_path), str(exc).rstrip("; "))]
    listed = record.get("stages")
    if not isinstance(listed, dict):
        return [Problem("malformed-record", rel(root, record_path), "has no 'stages' map")]
    problems = []
    shown = rel(root, version_dir)
    for stage in sorted(set(listed) | set(manifests)):
        if stage not in manifests:
            problems.append(Problem("missing-stage", f"{shown}/{stage}", f"listed in {VERSION_RECORD} but not in the store"))
        elif stage not in listed:
            problems.append(Problem("unrecorded-stage", f"{shown}/{stage}", f"committed but not listed in {VERSION_RECORD}"))
        elif listed[stage] != manifests[stage]:
            problems.append(Problem("hash-mismatch", f"{shown}/{stage}/{MANIFEST_NAME}",
                                    f"sha256 {manifests[stage]}, but {VERSION_RECORD} pinned {listed[stage]}"))
    return problems


def _check_input_links(store: ArtifactStore, version_dir: Path, manifests: dict[str, str]) -> list[Problem]:
    problems = []
    for stage in manifests:
        try:
            inputs = read_sealed(read_regular(version_dir / stage / MANIFEST_NAME), stage, "")["inputs"]
        except (ArtifactError, OSError, KeyError):
            continue  # already reported as malformed
        for name, pin in sorted(inputs.items()):
            try:
                upstream = paths.stage_dir(store.root, pin["model"], pin["version"], pin["stage"]) / MANIFEST_NAME
                actual = sha256_bytes(read_regular(upstream))
            except (ArtifactError, OSError):
                actual = None  # a pin naming no valid stage, or a manifest gone or not a plain file
            if actual != pin["manifest_sha256"]:
                problems.append(Problem("broken-input", f"{rel(store.root, version_dir)}/{stage}",
                                        f"input {name!r} ({pin['version']}/{pin['stage']}) "
                                        f"{'is missing' if actual is None else 'changed since this stage read it'}"))
    return problems


def _check_audit_log(store: ArtifactStore, model: str) -> list[Problem]:
    path = store.root / model / AUDIT_FILE  # a regular file: the caller checked with lstat
    shown = f"{model}/{AUDIT_FILE}"
    problems = []
    start = torn_tail(path)
    if start is not None:
        size = os.lstat(path).st_size
        problems.append(Problem("torn-audit-line", shown,
                                f"its last {size - start} byte(s) (from offset {start}) are a line cut off without "
                                "its newline by a crash or a full disk; that move was never committed: "
                                "`fsck --repair` cuts it off", repairable=True))
    try:
        store.audit_log(model)
    except ArtifactError as exc:
        problems.append(Problem("malformed-audit-log", shown, str(exc)))
    return problems


def _check_aliases(store: ArtifactStore, model: str) -> list[Problem]:
    root = store.root
    entries, problems = split_lock_files(root, scan(root / model / ALIASES_DIR))
    moves = None
    for entry in entries:
        if entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX):
            problems += [special(root, entry)] if entry.is_special else orphan(root, entry.path, "orphan-temp")
        elif entry.path.suffix == ".json" and NAME_PATTERN.fullmatch(entry.path.stem) and ".." not in entry.path.stem:
            if entry.is_special or entry.is_dir:
                problems.append(special(root, entry) if entry.is_special else
                                Problem("malformed-alias", rel(root, entry.path), "a folder, not an alias file"))
                continue
            if moves is None:
                audit = root / model / AUDIT_FILE
                moves = committed_moves(audit, root) if stat.S_ISREG(lstat_mode(audit) or 0) else []
            problems += _check_alias(store, model, entry.path, moves)
        elif entry.is_special:
            problems.append(special(root, entry))
        # Anything else (the lock file, logs other features keep) is not the alias files' business.
    return problems


def _check_alias(store: ArtifactStore, model: str, path: Path, moves: list[dict]) -> list[Problem]:
    shown = rel(store.root, path)
    try:
        version = current_target(path, store.root, moves)[0]  # read only: fsck finishes no move
    except ArtifactError as exc:
        return [Problem("malformed-alias", shown, str(exc))]
    folder = store.root / model / VERSIONS_DIR / version
    if not stat.S_ISDIR(lstat_mode(folder) or 0):
        return [Problem("dangling-alias", shown, f"points at {version}, which does not exist; "
                        "point it at an existing version")]
    record_path = folder / VERSION_RECORD
    if not stat.S_ISREG(lstat_mode(record_path) or 0):
        return [Problem("dangling-alias", shown, f"points at {version}, which was never finalized")]
    if path.stem != RELEASE:
        return []
    ref = VersionRef(model, version, str(folder))
    if any(entry.is_special for entry in scan(folder / DECISIONS_DIR)):
        return []  # a FIFO among the decisions would block the read; it is reported under the version
    try:
        status = _read_record(record_path, shown).get("status")
        verify_finalized_version(store.root, ref)
        read_decisions(folder, store.root)
    except ArtifactError:
        return []  # the damage is reported under the version itself, once
    passed, why = effective_verdict(store.root, ref)  # the newest decision, else the run's own record
    if passed:
        return []
    unlike = f"whose status is {status!r}" + (", not 'passed'" if status != "passed" else "")
    return [Problem("release-not-passed", shown, f"points at {version}, {unlike}; {why}")]


def legacy_or_corrupt(root: Path, path: Path, exc: ArtifactCorrupt) -> Problem:
    """A checkpoint of an older quantgate (pickles, no seal) is a warning: resume refuses it, nothing is damaged."""
    if exc.kind == LEGACY_CHECKPOINT:
        return Problem(LEGACY_CHECKPOINT, rel(root, path), "written by a quantgate whose checkpoints held pickles "
                       "(no seal): `--resume` never loads it; delete the folder to silence this", severity="warning")
    return Problem("corrupt-checkpoint", rel(root, path), str(exc))
