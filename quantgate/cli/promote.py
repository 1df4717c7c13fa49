"""`quantgate promote VERSION`: point `release` at a version whose gate passed."""

from __future__ import annotations

import argparse

from quantgate.artifacts import RELEASE
from quantgate.artifacts.errors import AliasMoved
from quantgate.cli.shared import (
    MODEL_PICK_HELP,
    add_model_option,
    add_reason_option,
    add_store_option,
    finished_version,
    store_and_model,
)
from quantgate.cli.verdict import Refused


def register(commands) -> None:
    parser = commands.add_parser("promote", help=f"point '{RELEASE}' at a version whose gate passed")
    parser.add_argument("version", help="version to release, e.g. v3")
    add_model_option(parser, help=MODEL_PICK_HELP)
    add_store_option(parser)
    add_reason_option(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Move `release` to the version; exit 0 also when it already points there.

    The verdict is read and `release` moved under the model's alias lock, in one step.

    Raises:
        BadTarget: unknown model or version, or one that did not finish.
        Refused: the version's gate did not pass or cannot be verified.
    """
    store, model = store_and_model(args)
    ref = finished_version(store, model, args.version)
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            with store.alias_moves(model) as moves:
                passed, why = store.release_verdict(ref)
                if not passed:
                    raise Refused(f"refusing to promote {model}/{ref.version} to {RELEASE}: {why}. Promote a version "
                                  f"whose gate passed, or decide again with `quantgate gate {ref.version}`; "
                                  "nothing moved")
                current = moves.current(RELEASE)
                if current == ref.version:
                    print(f"{RELEASE} already points at {model}/{ref.version}; nothing moved")
                    return 0
                moves.move(RELEASE, ref.version, reason=args.reason or f"promoted ({why})", action="promote")
            break
        except AliasMoved:
            # A shared (S3) store has no lock: another move committed first. Read and decide again.
            if attempt == _ATTEMPTS:
                raise
    print(f"{RELEASE}: {model}/{current or 'none'} -> {ref.version} ({why})")
    return 0


# How often promote reads and decides again when other moves keep landing first (S3 stores only).
_ATTEMPTS = 5
