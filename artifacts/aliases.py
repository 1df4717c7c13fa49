"""Alias files: the one mutable part of the store, each replaced whole in one step.

An alias file (<model>/aliases/<alias>.json) names the version it points at, when and why it
moved, and where it pointed before, so a release can be traced and rolled back.
"""

from pathlib import Path

from . import locks
from .errors import ArtifactCorrupt, InvalidName
from .manifest import read_sealed, replace_file, sealed_json, utc_now
from .names import NAME_PATTERN, check_version

# Held while an alias is read, changed and written, so concurrent moves are never lost.
LOCK_NAME = ".lock"


def read_alias(path: Path, store_root: Path) -> str | None:
    """The version named by the alias file at `path`, or None if there is no such file.

    Raises:
        ArtifactCorrupt: the file is not a valid alias record.
    """
    shown = path.relative_to(store_root).as_posix()
    hint = "set the alias again with set_alias (or run `quantgate fsck` to see what else changed)"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    record = read_sealed(data, f"alias file {shown}", hint)
    try:
        return check_version(record["version"])
    except (KeyError, TypeError, InvalidName) as exc:
        raise ArtifactCorrupt(
            f"alias file {path.relative_to(store_root).as_posix()} is not a valid alias record ({exc!r}); "
            "set the alias again with set_alias"
        ) from exc


def write_alias(aliases_dir: Path, model: str, alias: str, version: str, reason: str,
                store_root: Path) -> str | None:
    """Point `alias` at `version` by atomically replacing its file; return the version it pointed at."""
    aliases_dir.mkdir(exist_ok=True)
    path = aliases_dir / f"{alias}.json"
    with locks.lock_file(aliases_dir / LOCK_NAME):
        try:
            previous = read_alias(path, store_root)
        except ArtifactCorrupt:
            previous = None  # setting the alias again is how a damaged alias file is fixed
        record = {
            "model": model,
            "alias": alias,
            "version": version,
            "updated_at": utc_now(),
            "reason": reason,
            "previous_version": previous,
        }
        replace_file(path, sealed_json(record))
    return previous


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
