"""What `promote` and `rollback` share: `Refused`, and reading the release history from the audit log.

Both move `release`, and both only to a version whose newest verified decision passed
(`ArtifactStore.release_verdict`, the rule fsck applies too). Each decides and moves inside one
`store.alias_moves(model)` block, so no other move can land between what it read and what it moves.
"""

from __future__ import annotations

from quantgate.errors import Rejected


class Refused(Rejected):
    """An alias move was refused because the target's gate did not pass (or cannot be trusted)."""


def release_targets(entries: list[dict], alias: str) -> list[str]:
    """The stack of `alias` targets the audit log describes: moves push, rollbacks pop."""
    stack: list[str] = []
    for entry in entries:
        if entry.get("alias") != alias:
            continue
        if entry.get("action") == "rollback":
            if stack:
                stack.pop()
        elif not stack or stack[-1] != entry.get("to"):
            stack.append(entry.get("to"))
    return stack
