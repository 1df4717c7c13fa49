"""Where things live in a store: path arithmetic over validated names, and what is committed there.

Every function validates the names it joins, so no caller can build a path that escapes the
store; only the listings (`version_names`, `committed_stages`) touch the filesystem.
"""

from pathlib import Path

from .layout import ALIASES_DIR, RUN_LOG_FILE, VERSIONS_DIR
from .manifest import MANIFEST_NAME
from .names import (
    NAME_PATTERN,
    RESERVED_STAGE_NAMES,
    VERSION_PATTERN,
    check_alias,
    check_model,
    check_stage,
    check_version,
    version_number,
)


def model_dir(root: Path, model: str) -> Path:
    return root / check_model(model)


def versions_dir(root: Path, model: str) -> Path:
    return model_dir(root, model) / VERSIONS_DIR


def version_dir(root: Path, model: str, version: str) -> Path:
    return versions_dir(root, model) / check_version(version)


def stage_dir(root: Path, model: str, version: str, stage: str) -> Path:
    return version_dir(root, model, version) / check_stage(stage)


def run_log_file(root: Path, model: str, version: str) -> Path:
    return version_dir(root, model, version) / RUN_LOG_FILE


def aliases_dir(root: Path, model: str) -> Path:
    return model_dir(root, model) / ALIASES_DIR


def alias_file(root: Path, model: str, alias: str) -> Path:
    return aliases_dir(root, model) / f"{check_alias(alias)}.json"


def relative(root: Path, path: Path) -> str:
    """`path` as the store shows it in messages: relative to the root, with forward slashes."""
    return path.relative_to(root).as_posix()


def version_names(root: Path, model: str) -> list[str]:
    """The version folders of `model` (v1, v2, ...), sorted by number; [] for an unknown model."""
    folder = versions_dir(root, model)
    if not folder.is_dir():
        return []
    names = [e.name for e in folder.iterdir() if VERSION_PATTERN.fullmatch(e.name) and e.is_dir()]
    return sorted(names, key=version_number)


def committed_stages(folder: Path) -> list[str]:
    """The committed stages in the version folder `folder`, sorted."""
    # Staging folders start with "." and so never match the name rules: readers skip them. The
    # store's own entries (version.json, run.log, ...) are never stages, whatever they hold.
    return sorted(
        entry.name for entry in folder.iterdir()
        if NAME_PATTERN.fullmatch(entry.name) and entry.name not in RESERVED_STAGE_NAMES
        and (entry / MANIFEST_NAME).is_file()
    )
