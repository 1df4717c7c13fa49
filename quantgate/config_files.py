"""Reading settings from YAML files and `--set KEY=VALUE` overrides into the plain dict `validate_config` checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quantgate.config import MAX_CONFIG_VALUES, ConfigError, cut, shown_value


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML config file into a dict.

    Raises:
        ConfigError: the file is missing, is not valid YAML, expands too far, or is not a mapping.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"config file {path}: cannot be read ({exc.strerror}); check the path"]) from exc
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"config file {path}: not valid YAML ({cut(str(exc))}); fix the syntax"]) from exc
    check_expansion(loaded, f"config file {path}")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError([f"config file {path}: expected a mapping of settings, got {type(loaded).__name__}"])
    return loaded


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` override in place; the value is parsed as YAML (so 3, 0.5, true work).

    Raises:
        ConfigError: the assignment has no '=', walks through a non-mapping, or its value expands too far.
    """
    key, sep, value = assignment.partition("=")
    shown = shown_value(assignment)
    if not sep or not key.strip():
        raise ConfigError([f"override {shown}: expected KEY=VALUE such as train.epochs=3"])
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError([f"override {shown}: {shown_value(part)} is a value, not a section"])
        node = child
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError([f"override {shown}: value is not valid YAML ({cut(str(exc))})"]) from exc
    check_expansion(parsed, f"override {shown}")
    node[parts[-1]] = parsed


def check_expansion(loaded: Any, source: str) -> None:
    """Refuse YAML whose aliases expand it past MAX_CONFIG_VALUES values (an "anchor bomb", or an alias
    inside itself), which pydantic and error messages would walk in full; counting stops at the limit.

    Raises:
        ConfigError: naming the source, the limit and the fix.
    """
    pending, seen = [loaded], 0
    while pending:
        seen += 1
        if seen > MAX_CONFIG_VALUES:
            raise ConfigError([f"{source}: expands to more than {MAX_CONFIG_VALUES} values (YAML aliases repeated, "
                               "nested or inside themselves); a config has a few hundred: write it out, no anchors"])
        value = pending.pop()
        if isinstance(value, (dict, list, tuple)):
            pending.extend(value.items() if isinstance(value, dict) else value)
