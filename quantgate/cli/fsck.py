"""`quantgate fsck`: check every version, stage, file and alias of the store; optionally remove orphans.

Exit codes: 0 no errors (warnings such as interrupted versions may be listed), 1 errors found,
2 bad input (store or model name).
"""

from __future__ import annotations

import argparse

from quantgate.cli.shared import MODEL_FILTER_HELP, add_model_option, add_store_option
from quantgate.settings import STORE_ENV, resolve_store_root


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
        ArtifactNotFound: there is no store folder where --store (or its default) points.
    """
    from quantgate.artifacts import ArtifactNotFound, ArtifactStore
    from quantgate.artifacts.fsck import check_store, repair

    root = resolve_store_root(args.store)
    if not root.is_dir():  # fsck looks; it must not create a store where a typo pointed
        raise ArtifactNotFound(f"no artifact store at {root}; pass --store DIR or set {STORE_ENV}")
    store = ArtifactStore(root)
    problems = check_store(store, args.model)
    if args.repair:
        for path in repair(store, problems):
            print(f"removed {path}")
        problems = check_store(store, args.model)
    for problem in problems:
        print(problem.describe())
    errors = [problem for problem in problems if problem.severity == "error"]
    warnings = len(problems) - len(errors)
    repairable = sum(problem.repairable for problem in errors)
    hint = f" ({repairable} removable with --repair)" if repairable else ""
    print(f"fsck {store.root}: {len(errors)} error(s){hint}, {warnings} warning(s)")
    return 1 if errors else 0  # fsck's own contract (module docstring): 1 means the store has errors
