"""Alias files: the one mutable part of the store, each replaced whole in one step after its audit line.

An alias file (<model>/aliases/<alias>.json) names the version it points at, when and why it
moved, where it pointed before, and the `move_id` of the audit entry that moved it there.

How a move commits (releases.py writes, this module reads): under the model's alias lock the
audit line {from, to, move_id, from_move} is appended and fsynced first, then the alias file is
replaced. The audit log is the source of truth. A reader compares the alias file with the last
audit entry for that alias:

- the file carries the entry's `move_id`: the move completed;
- the file is exactly what the entry moved *from* (its `move_id` is the entry's `from_move`, its
  version the entry's `from`): the move was interrupted (kill -9) after its commit point, so the
  reader, under the lock, rolls the file forward and returns the entry's `to`;
- anything else (the file was written by hand, or the entry predates move ids): the file stands.
"""

from pathlib import Path

from .audit import LOCK_NAME as LOCK_NAME  # re-exported: fsck skips the lock file by this name
from .audit import alias_lock, holds_alias_lock, read_log
from .errors import ArtifactCorrupt, InvalidName
from .layout import AUDIT_FILE
from .manifest import make_dir, read_sealed, replace_file, sealed_json, utc_now
from .names import NAME_PATTERN, check_version


def read_alias_record(path: Path, store_root: Path) -> dict | None:
    """The verified record of the alias file at `path` (its "version" checked), or None if there is no file.

    Raises:
        ArtifactCorrupt: the file is not a valid alias record.
    """
    shown = path.relative_to(store_root).as_posix()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    record = read_sealed(data, f"alias file {shown}",
                         "set the alias again with set_alias (or run `quantgate fsck` to see what else changed)")
    try:
        check_version(record["version"])
    except (KeyError, TypeError, InvalidName) as exc:
        raise ArtifactCorrupt(
            f"alias file {shown} is not a valid alias record ({exc!r}); set the alias again with set_alias"
        ) from exc
    return record


def last_move(entries: list[dict], alias: str) -> dict | None:
    """The newest audit entry that moved `alias`, or None."""
    return next((entry for entry in reversed(entries) if entry.get("alias") == alias), None)


def interrupted(record: dict | None, entry: dict | None) -> bool:
    """Whether `entry` was committed but the alias file (`record`) still holds what it moved from."""
    if entry is None or not entry.get("move_id"):
        return False  # nothing logged, or logged before moves carried ids: the file is all there is
    held = (record.get("move_id"), record.get("version")) if record else (None, None)
    return held != (entry["move_id"], entry.get("to")) and held == (entry.get("from_move"), entry.get("from"))


def current_target(path: Path, store_root: Path, entries: list[dict]) -> tuple[str | None, str | None, bool]:
    """(version, move id, interrupted) of the alias at `path` given the audit `entries`; see the module doc.

    Raises:
        ArtifactCorrupt: the alias file is not a valid alias record.
    """
    record = read_alias_record(path, store_root)
    entry = last_move(entries, path.stem)
    if interrupted(record, entry):
        return entry["to"], entry["move_id"], True
    return (record["version"], record.get("move_id"), False) if record else (None, None, False)


def committed_moves(log: Path, store_root: Path) -> list[dict]:
    """The audit log's entries, or [] when it is damaged: then the alias files alone are what is known
    (fsck reports the log; `quantgate log` and `rollback` refuse it)."""
    try:
        return read_log(log, store_root)
    except ArtifactCorrupt:
        return []


def read_alias(path: Path, store_root: Path) -> str | None:
    """The version named by the alias at `path` (an interrupted move rolled forward), or None if never set.

    Raises:
        ArtifactCorrupt: the file is not a valid alias record.
    """
    model_dir = path.parent.parent
    log = model_dir / AUDIT_FILE
    version, _, unfinished = current_target(path, store_root, committed_moves(log, store_root))
    if not unfinished or holds_alias_lock(model_dir):
        return version
    try:
        with alias_lock(model_dir):  # a live mover holds it between its two steps: wait, then look again
            entries = committed_moves(log, store_root)
            version, move_id, unfinished = current_target(path, store_root, entries)
            if unfinished:
                entry = last_move(entries, path.stem)
                write_alias(path.parent, entry.get("model", model_dir.name), path.stem, version,
                            str(entry.get("why", "")), entry.get("from"), move_id)
    except OSError:
        pass  # a read-only store: nobody can be moving it, and the log already says where it points
    return version


def write_alias(aliases_dir: Path, model: str, alias: str, version: str, reason: str, previous: str | None,
                move_id: str) -> None:
    """Atomically replace the alias file with a record of the move `move_id`; the caller holds the alias lock."""
    make_dir(aliases_dir)
    record = {
        "model": model,
        "alias": alias,
        "version": version,
        "updated_at": utc_now(),
        "reason": reason,
        "previous_version": previous,
        "move_id": move_id,
    }
    replace_file(aliases_dir / f"{alias}.json", sealed_json(record))


def aliases_by_version(aliases_dir: Path, store_root: Path) -> dict[str, tuple[str, ...]]:
    """{version: names of the aliases pointing at it}, read from every alias file in `aliases_dir`."""
    found: dict[str, list[str]] = {}
    if aliases_dir.is_dir():
        # Temporary files start with "." and so never match the name rules.
        for path in sorted(aliases_dir.glob("*.json")):
            if NAME_PATTERN.fullmatch(path.stem) and ".." not in path.stem:
                try:
                    found.setdefault(read_alias(path, store_root), []).append(path.stem)
                except ArtifactCorrupt:
                    continue  # a damaged alias names no version; fsck reports it, listings go on
    return {version: tuple(names) for version, names in found.items()}
