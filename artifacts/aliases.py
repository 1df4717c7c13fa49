"""Alias files: the one mutable part of the store, each replaced whole in one step.

An alias file (<model>/aliases/<alias>.json) names the version it points at, when and why it
moved, and where it pointed before, so a release can be traced and rolled back.
"""

import json
from pathlib import Path

from .errors import ArtifactCorrupt, InvalidName
from .manifest import canonical_json, replace_file, utc_now
from .names import NAME_PATTERN, check_version


def read_alias(path: Path, store_root: Path) -> str | None:
    """The version named by the alias file at `path`, or None if there is no such file.

    Raises:
        ArtifactCorrupt: the file is not a valid alias record.
    """
    try:
        return check_version(json.loads(path.read_bytes())["version"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, InvalidName) as exc:
        raise ArtifactCorrupt(
            f"alias file {path.relative_to(store_root).as_posix()} is not a valid alias record ({exc!r}); "
            "set the alias again with set_alias"
        ) from exc


def write_alias(aliases_dir: Path, model: str, alias: str, version: str, reason: str, store_root: Path) -> None:
    """Point `alias` at `version` by atomically replacing its file in `aliases_dir`."""
    aliases_dir.mkdir(exist_ok=True)
    path = aliases_dir / f"{alias}.json"
    record = {
        "model": model,
        "alias": alias,
        "version": version,
        "updated_at": utc_now(),
        "reason": reason,
        "previous_version": read_alias(path, store_root),
    }
    replace_file(path, canonical_json(record))


def aliases_by_version(aliases_dir: Path, store_root: Path) -> dict[str, tuple[str, ...]]:
    """{version: names of the aliases pointing at it}, read from every alias file in `aliases_dir`."""
    found: dict[str, list[str]] = {}
    if aliases_dir.is_dir():
        # Temporary files start with "." and so never match the name rules.
        for path in sorted(aliases_dir.glob("*.json")):
            if NAME_PATTERN.fullmatch(path.stem) and ".." not in path.stem:
                found.setdefault(read_alias(path, store_root), []).append(path.stem)
    return {version: tuple(names) for version, names in found.items()}
