"""Names and references: what the store hands out, and the rules every name must follow.

Every name ends up as a path component, so the rules are strict: they keep a name from
escaping the store (`../x`, `/abs`) or colliding with the store's own files.
"""

import re
from dataclasses import dataclass, field

from .errors import InvalidName
from .layout import CHECKPOINTS_DIR, DECISIONS_DIR, RELEASE, RUN_LOG_FILE, VERSION_RECORD

# fullmatch, not `$`: `$` would also accept a trailing newline.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
VERSION_PATTERN = re.compile(r"v[1-9][0-9]*")
NAME_RULE = (
    f"must match {NAME_PATTERN.pattern} (lowercase letters, digits, '.', '_' or '-', "
    "starting with a letter or digit, at most 64 characters) and must not contain '..'"
)
# A stage folder sits next to the version record, the run log, the checkpoints and the decisions
# folders; it must not clash with them.
RESERVED_STAGE_NAMES = frozenset({VERSION_RECORD, RUN_LOG_FILE, CHECKPOINTS_DIR, DECISIONS_DIR})


@dataclass(frozen=True)
class VersionRef:
    """One version of one model.

    `path` is the absolute version folder (as a str) when the ref was made: `Path(ref.path)` is
    the documented way to reach a version folder. For what lies inside it, ask the store
    (`stage_dir`, `run_log_path`) rather than joining names by hand.
    """

    model: str
    version: str
    path: str


@dataclass(frozen=True)
class StageRef:
    """One committed stage, pinned by the sha256 of its manifest so later reads can be checked."""

    model: str
    version: str
    stage: str
    path: str
    manifest_sha256: str


@dataclass(frozen=True)
class VersionInfo:
    """A summary of one version for listings; `status` is "incomplete" until it is finalized."""

    model: str
    version: str
    status: str
    aliases: tuple[str, ...]
    # Excluded from the hash so that VersionInfo stays hashable despite holding a dict.
    record: dict = field(hash=False)
    stages: tuple[str, ...]


def _check_name(kind: str, value: object, example: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value) or ".." in value:
        raise InvalidName(f"{kind} {value!r} is invalid: it {NAME_RULE}; for example {example!r}")
    return value


def check_model(value: object) -> str:
    """Return `value` if it is a valid model name.

    Raises:
        InvalidName: the name breaks the naming rules.
    """
    return _check_name("model name", value, "mnist-cnn")


def check_alias(value: object) -> str:
    """Return `value` if it is a valid alias name.

    Raises:
        InvalidName: the name breaks the naming rules.
    """
    return _check_name("alias name", value, RELEASE)


def check_stage(value: object) -> str:
    """Return `value` if it is a valid stage name.

    Raises:
        InvalidName: the name breaks the naming rules or is reserved by the store.
    """
    _check_name("stage name", value, "train")
    if value in RESERVED_STAGE_NAMES:
        raise InvalidName(
            f"stage name {value!r} is reserved for the store's own files; choose another, for example 'train'"
        )
    return value


def check_version(value: object) -> str:
    """Return `value` if it is a valid version name such as "v3".

    Raises:
        InvalidName: the value is not "v" followed by a positive number without leading zeros.
    """
    if not isinstance(value, str) or not VERSION_PATTERN.fullmatch(value):
        raise InvalidName(
            f"version {value!r} is invalid: it must match {VERSION_PATTERN.pattern} "
            "('v' and a positive number without leading zeros); for example 'v3'"
        )
    return value


def version_number(version: str) -> int:
    """The number in a valid version name: "v12" -> 12."""
    return int(check_version(version)[1:])
