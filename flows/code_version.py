"""The code version of a stage: a digest of its module's source and the stage modules it imports.

Part of a stage's input digest, so editing a stage (or a stage module it uses, such as
stages/amp.py for train) recomputes that stage and everything after it on the next run.
Only quantgate.stages modules count: config and error wording cannot change a stage's output,
and a config value that does is already in the digest.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

STAGES_PACKAGE = "quantgate.stages"


def _stage_imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(STAGES_PACKAGE):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from quantgate.stages import amp`
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(STAGES_PACKAGE))
    return found


def _source_file(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, AttributeError):  # `quantgate.stages.errors.DataError` names a class, not a module
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


@lru_cache(maxsize=None)
def code_digest(module: str) -> str:
    """sha256 over the sources of `module` and every quantgate.stages module it imports, transitively."""
    seen: dict[str, bytes] = {}
    pending = [module]
    while pending:
        name = pending.pop()
        path = _source_file(name) if name not in seen else None
        if path is None:
            continue  # an imported name that is a function or constant, not a module
        seen[name] = path.read_bytes()
        pending.extend(_stage_imports(seen[name].decode("utf-8")))
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(f"{name}\n{len(seen[name])}\n".encode())
        digest.update(seen[name])
    return digest.hexdigest()
