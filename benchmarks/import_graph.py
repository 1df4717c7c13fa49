"""The house measured from its sources: how stages, the bundle, the CLI, the flows and the benchmarks import each
other, import cycles between modules, and modules over 400 lines.

    python benchmarks/import_graph.py [CHECKOUT]      # default: this repository

Every `import` counts, also those inside functions and under TYPE_CHECKING. A stage's package itself (its entry
points), its `outputs` declaration and `stages/shared/` are what others may import; any other module of a stage
imported from another stage package, or from outside `stages/`, is counted as an import of a stage's internals
(one per import statement and target stage). Nothing is imported or run: the sources are parsed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Where each top-level folder installs (pyproject.toml's package-dir).
PREFIXES = {"quantgate": ("quantgate",), "flows": ("quantgate", "flows"), "stages": ("quantgate", "stages"),
            "artifacts": ("quantgate", "artifacts"), "benchmarks": ("benchmarks",)}
PACKAGE_FOLDERS = ("quantgate", "flows", "stages", "artifacts")
MAX_LINES = 400


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    parts = [*PREFIXES[parts[0]], *parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_file(root: Path, name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "quantgate":
        return None
    folder = {"flows": "flows", "stages": "stages", "artifacts": "artifacts"}.get(parts[1] if len(parts) > 1 else "")
    base = root.joinpath(folder, *parts[2:]) if folder else root.joinpath("quantgate", *parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(root: Path, source: Path) -> list[list[str]]:
    """Each import statement's targets, as module names (`from a import b` is a.b when b is a module)."""
    statements = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            statements.append([f"{node.module}.{alias.name}" if module_file(root, f"{node.module}.{alias.name}")
                               else node.module for alias in node.names])
        elif isinstance(node, ast.Import):
            statements.append([alias.name for alias in node.names])
    return statements


def stage_internal(name: str) -> str | None:
    """The stage whose internals `name` is (None: not a stage module, or one others may import)."""
    parts = name.split(".")
    if parts[:2] != ["quantgate", "stages"] or len(parts) < 4 or parts[2] == "shared" or parts[-1] == "outputs":
        return None
    return parts[2]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def measure(root: Path) -> dict:
    between_stages, outside, graph, long_modules = Counter(), Counter(), {}, {}
    for folder in (*PACKAGE_FOLDERS, "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            name = module_name(root, path)
            parts = name.split(".")
            own_stage = parts[2] if parts[:2] == ["quantgate", "stages"] and len(parts) > 2 else None
            statements = imported(root, path)
            if folder != "benchmarks":
                graph[name] = {target for targets in statements for target in targets
                               if target != name and module_file(root, target)}
                if (lines := len(path.read_text().splitlines())) > MAX_LINES:
                    long_modules[path.relative_to(root).as_posix()] = lines
            for targets in statements:
                for stage in {stage_internal(target) for target in targets} - {None, own_stage}:
                    if own_stage:
                        between_stages[(own_stage, stage)] += 1
                    else:
                        outside["benchmarks" if folder == "benchmarks" else parts[1]] += 1
    return {"between_stages": sum(between_stages.values()), "stage_pairs": len(between_stages),
            "pairs": {f"{a} -> {b}": n for (a, b), n in sorted(between_stages.items())},
            "outside": dict(sorted(outside.items())), "cycles": cycles(graph), "over_400_lines": long_modules}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", type=Path, default=REPO, help="a checkout of quantgate")
    found = measure(parser.parse_args(argv).checkout.resolve())
    print(f"stage -> another stage's internals: {found['between_stages']} imports over {found['stage_pairs']} "
          "stage pairs")
    for pair, count in found["pairs"].items():
        print(f"  {pair}: {count}")
    print("outside stages/ -> a stage's internals:", ", ".join(f"{k} {v}" for k, v in found["outside"].items())
          or "none")
    print(f"import cycles between modules: {len(found['cycles'])}")
    for group in found["cycles"]:
        print("  " + " <-> ".join(group))
    print(f"modules over {MAX_LINES} lines: {len(found['over_400_lines'])}")
    for module, lines in found["over_400_lines"].items():
        print(f"  {module}: {lines}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
