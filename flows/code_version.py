"""The code version of a stage: a digest of its whole package and of all stage code it imports.

Part of a stage's input digest, so editing any file of a stage (or of a shared module or another
stage package it imports, as quantize imports convert for its trials) recomputes that stage and
everything after it on the next run. Only quantgate.stages counts: config and error wording cannot
change a stage's output, and a config value that does is already in the digest.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

STAGES_PACKAGE = "quantgate.stages"
SHARED = "shared"


def stages_root() -> Path:
    spec = importlib.util.find_spec(STAGES_PACKAGE)
    return Path(next(iter(spec.submodule_search_locations)))


def _imported_stage_modules(source: str) -> set[str]:
    """Every `quantgate.stages...` name a source imports, as dotted paths below quantgate.stages."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(STAGES_PACKAGE):
            below = node.module[len(STAGES_PACKAGE):].lstrip(".")
            found.add(below)
            # `from quantgate.stages.shared import progress` names a module; `import X` of a class is harmless
            found.update(f"{below}.{alias.name}".lstrip(".") for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(STAGES_PACKAGE):].lstrip(".") for alias in node.names
                         if alias.name.startswith(STAGES_PACKAGE))
    return {name for name in found if name}


def _unit_files(root: Path, dotted: str) -> list[Path]:
    """The files a dotted name below quantgate.stages stands for: a whole stage package, or one shared module."""
    parts = dotted.split(".")
    if parts[0] != SHARED:
        package = root / parts[0]
        return sorted(package.rglob("*.py")) if package.is_dir() else []
    module = root.joinpath(*parts[:2])
    candidates = [root / SHARED / "__init__.py"]  # runs before any shared module does
    if len(parts) > 1:
        candidates += [module.with_suffix(".py"), module / "__init__.py"]
    return [path for path in candidates if path.is_file()]


def code_files(stage: str) -> dict[str, bytes]:
    """The sources `code_digest(stage)` covers, by path relative to stages/: the stage's package and,
    transitively, every stage package or shared module it imports.

    Raises:
        ValueError: there is no stage package of that name.
    """
    root = stages_root()
    seen: dict[str, bytes] = {}
    pending = _unit_files(root, stage)
    if not pending:
        raise ValueError(f"no stage package {stage!r} in {root}")
    while pending:
        path = pending.pop()
        name = path.relative_to(root).as_posix()
        if name in seen:
            continue
        seen[name] = path.read_bytes()
        for dotted in _imported_stage_modules(seen[name].decode("utf-8")):
            pending.extend(_unit_files(root, dotted))
    return seen


@lru_cache(maxsize=None)
def code_digest(stage: str) -> str:
    """sha256 over `code_files(stage)`, in path order."""
    digest = hashlib.sha256()
    for name, source in sorted(code_files(stage).items()):
        digest.update(f"{name}\n{len(source)}\n".encode())
        digest.update(source)
    return digest.hexdigest()
