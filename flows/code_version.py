"""The code version of a stage: a digest of its whole package and of every stage or library module it imports.

Part of a stage's input digest, so editing any file of a stage, or of a module it runs (a shared module, another
stage's outputs declaration, or a library such as `quantgate.int8`, which quantize's trials lower with), recomputes
that stage and everything after it on the next run. An edit to a module the stage never imports does not.

Only the stages and the libraries beneath them count (`LIBRARIES`): config and error wording cannot change a
stage's output, and a config value that does is already in the digest; the store verifies itself. A new
library goes into `quantgate.layers.LIBRARIES`, or editing it would not recompute what uses it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from quantgate.layers import LIBRARIES, STAGES_PACKAGE

PACKAGE = "quantgate"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations)))


def source_roots() -> dict[str, Path]:
    """Where the covered code lives: the stages' folder and the libraries' (the package's own folder)."""
    return {STAGES_PACKAGE: _package_dir(STAGES_PACKAGE), PACKAGE: _package_dir(PACKAGE)}


def _covered(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == PACKAGE and len(parts) > 1 and (parts[1] == "stages" or parts[1] in LIBRARIES)


def _module_files(roots: dict[str, Path], dotted: str) -> list[tuple[str, Path]]:
    """(name, file) of the module `dotted` stands for and of each package `__init__` importing it runs; [] for a
    name that is not a covered module (a class or function imported by name, or code outside the stages and
    libraries). Names are paths relative to the repository: stages/..., quantgate/...."""
    if not _covered(dotted):
        return []
    parts = dotted.split(".")
    in_stages = parts[1] == "stages"
    root, label, below = ((roots[STAGES_PACKAGE], "stages", parts[2:]) if in_stages
                          else (roots[PACKAGE], PACKAGE, parts[1:]))
    found = []
    for depth in range(1, len(below) + 1):
        folder = root.joinpath(*below[:depth])
        for path in ((folder / "__init__.py",) if depth < len(below) else (folder.with_suffix(".py"),
                                                                            folder / "__init__.py")):
            if path.is_file():
                found.append((f"{label}/{path.relative_to(root).as_posix()}", path))
    if in_stages and (root / "__init__.py").is_file():
        found.append(("stages/__init__.py", root / "__init__.py"))
    return found


def _imported_names(source: str) -> set[str]:
    """Every dotted name a source imports (`from a.b import c` gives a.b and a.b.c: c may be a module), and every
    string that spells a covered module in full (a stage package's lazy export of a library name)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _covered(node.value):
            found.add(node.value)
    return {name for name in found if _covered(name)}


def code_files(stage: str) -> dict[str, bytes]:
    """The sources `code_digest(stage)` covers, by repository-relative path: the stage's whole package and,
    transitively, every stage or library module it imports.

    Raises:
        ValueError: there is no stage package of that name.
    """
    roots = source_roots()
    package = roots[STAGES_PACKAGE] / stage
    if not package.is_dir():
        raise ValueError(f"no stage package {stage!r} in {roots[STAGES_PACKAGE]}")
    pending = [(f"stages/{path.relative_to(roots[STAGES_PACKAGE]).as_posix()}", path)
               for path in sorted(package.rglob("*.py"))]
    seen: dict[str, bytes] = {}
    while pending:
        name, path = pending.pop()
        if name in seen:
            continue
        seen[name] = path.read_bytes()
        for dotted in _imported_names(seen[name].decode("utf-8")):
            pending.extend(_module_files(roots, dotted))
    return seen


@lru_cache(maxsize=None)
def code_digest(stage: str) -> str:
    """sha256 over `code_files(stage)`, in path order."""
    digest = hashlib.sha256()
    for name, source in sorted(code_files(stage).items()):
        digest.update(f"{name}\n{len(source)}\n".encode())
        digest.update(source)
    return digest.hexdigest()
