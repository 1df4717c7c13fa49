"""`quantgate rollback`: point `release` back at its previous target, as the audit log records it."""

from __future__ import annotations

import argparse

from quantgate.artifacts import RELEASE
from quantgate.cli.shared import (
    MODEL_PICK_HELP,
    add_model_option,
    add_reason_option,
    add_store_option,
    finished_version,
    store_and_model,
)
from quantgate.cli.verdict import Refused, release_targets


def register(commands) -> None:
    parser = commands.add_parser("rollback", help=f"point '{RELEASE}' back at its previous target")
    add_model_option(parser, help=MODEL_PICK_HELP)
    add_store_option(parser)
    add_reason_option(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Move `release` to the target it had before its current one.

    The history is read, the target chosen and `release` moved under the model's alias lock, in
    one step, so a promotion cannot land in between and be silently undone.

    Raises:
        Refused: no release yet, no earlier target, an alias moved outside quantgate, or a target whose
            gate does not pass (any more).
    """
    store, model = store_and_model(args)
    with store.alias_moves(model) as moves:
        current = moves.current(RELEASE)
        if current is None:
            raise Refused(f"{model} has no {RELEASE} yet; there is nothing to roll back")
        stack = release_targets(moves.history(), RELEASE)
        if not stack or stack[-1] != current:
            raise Refused(f"the audit log's latest {RELEASE} of {model} is {stack[-1] if stack else 'none'}, but "
                          f"the alias points at {current}: it was moved outside quantgate, so the previous target "
                          "is unknown; use `quantgate promote VERSION`; nothing moved")
        if len(stack) < 2:
            raise Refused(f"{RELEASE} of {model} has had no earlier target than {current}; "
                          "there is nothing to roll back to")
        target = stack[-2]
        passed, why = store.release_verdict(finished_version(store, model, target))
        if not passed:
            raise Refused(f"refusing to roll {RELEASE} of {model} back to {target}: {why}. "
                          f"Promote a version whose gate passed with `quantgate promote VERSION`; nothing moved")
        moves.move(RELEASE, target, reason=args.reason or f"rollback from {current}", action="rollback")
    print(f"{RELEASE}: {model}/{current} -> {target} (rollback; {why})")
    return 0
