"""`quantgate fsck`: check every version, stage, file and alias of the store; optionally remove orphans.

Exit codes: 0 no errors (warnings such as interrupted versions may be listed), 1 errors found,
2 bad input (store or model name).
"""

from __future__ import annotations

import argparse

from quantgate.cli.shared import MODEL_FILTER_HELP, add_model_option, add_store_option, check_is_store
from quantgate.settings import resolve_store_root


def register(commands) -> None:
    parser = commands.add_parser("fsck", help="check the store for missing, changed or orphaned files")
    add_store_option(parser)
    add_model_option(parser, help=MODEL_FILTER_HELP)
    parser.add_argument("--repair", action="store_true",
                        help="remove orphaned staging folders and temporary files (never user data)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Print every problem and a one-line count.

    Raises:
        NoStore: there is no store where --store (or its default) points (exit 2, as for every bad input).
    """
    from quantgate.artifacts import open_store
    from quantgate.artifacts.fsck import check_store, repair

    root = resolve_store_root(args.store)
    check_is_store(root)  # fsck looks; it must not create a store where a typo pointed
    store = open_store(root)
    problems = check_store(store, args.model)
    if args.repair:
        kinds = {problem.path: problem.kind for problem in problems}
        for path in repair(store, problems):
            done = "cut the torn last line of" if kinds[path] == "torn-audit-line" else "removed"
            print(f"{done} {path}")
        problems = check_store(store, args.model)
    for problem in problems:
        print(problem.describe())
    errors = [problem for problem in problems if problem.severity == "error"]
    warnings = len(problems) - len(errors)
    repairable = sum(problem.repairable for problem in errors)
    hint = f" ({repairable} removable with --repair)" if repairable else ""
    print(f"fsck {store.location}: {len(errors)} error(s){hint}, {warnings} warning(s)")
    return 1 if errors else 0  # fsck's own contract (module docstring): 1 means the store has errors
