"""Alias moves on S3: the audit log is the one commit point, and each alias is read from it.

Entry k+1 of `<model>/audit/` is created with `If-None-Match: *`, so exactly one move can take
each number: a move is committed when its entry exists, and the order of the numbers is the order
of the moves. There is no alias object to disagree with the log: an alias is the "to" of the
newest entry that moved it. A mover read the log up to entry k and decided on it; if entry k+1
exists by the time it commits (another worker moved something), it reads the log again, and if
the alias it moves is no longer where it was, the move fails with AliasMoved (nothing moved;
decide again), otherwise it takes the next number. So every entry's "from" is true. A plain
`set_alias` decided nothing on what it read: it retries from the alias's new place, as the local
store's lock would have ordered it.
"""

import uuid

from ..audit import current_actor
from ..errors import AliasMoved, ArtifactCorrupt
from ..manifest import read_sealed, sealed_json, utc_now
from ..names import check_alias
from ..releases import ANY
from .listing import audit_key


def target(entries: list[dict], alias: str) -> tuple[str | None, str | None]:
    """(version, move id) the alias holds after `entries`; (None, None) if never moved."""
    for entry in reversed(entries):
        if entry.get("alias") == alias:
            return entry.get("to"), entry.get("move_id")
    return None, None


def parse_entries(model: str, numbered: list[tuple[int, bytes]], where) -> list[dict]:
    """The verified audit entries 1..n from their objects; a gap or an edited entry is refused.

    Raises:
        ArtifactCorrupt: an entry is missing (a deleted object), out of place, or not the sealed record written.
    """
    entries = []
    hint = "the audit log is append-only: restore the object, or move the model's audit/ folder aside to start anew"
    for expected, (number, data) in enumerate(numbered, start=1):
        if number != expected:
            raise ArtifactCorrupt(f"audit entry {expected} of model {model!r} is missing from {where(expected)} "
                                  f"(the next one is {number}); {hint}", kind="malformed-audit")
        entry = read_sealed(data, f"audit entry {where(number)}", hint)
        if entry.get("seq") != number or entry.get("model") != model:
            raise ArtifactCorrupt(f"audit entry {where(number)} says it is entry {entry.get('seq')!r} of model "
                                  f"{entry.get('model')!r}; {hint}", kind="malformed-audit")
        entries.append(entry)
    return entries


class S3AliasMoves:
    """Read, decide and move the aliases of one model; see the module doc for what a conflict does.

    `store` is the S3Store: it reads the log (`audit_entries`), checks a move's target
    (`check_target`) and creates entries (`create_entry`).
    """

    def __init__(self, store, model: str, decided: bool = True):
        self.store, self.model = store, model
        # Inside an `alias_moves` block the caller decided on what it read, so a move of its alias by someone
        # else is a conflict; a plain `set_alias` (decided=False) moves from wherever the alias is by then.
        self.decided = decided
        self._entries = store.audit_entries(model)

    def current(self, alias: str) -> str | None:
        return target(self._entries, check_alias(alias))[0]

    def history(self) -> list[dict]:
        return list(self._entries)

    def move(self, alias: str, version: str, reason: str = "", action: str = "set", actor: str | None = None,
             expected_previous: object = ANY) -> str | None:
        check_alias(alias)
        self.store.check_target(self.model, alias, version)
        previous, previous_move = target(self._entries, alias)
        if expected_previous is not ANY and previous != expected_previous:
            raise AliasMoved(
                f"alias {alias!r} of model {self.model!r} points at {previous or 'nothing'}, not at "
                f"{expected_previous or 'nothing'} as expected: another move landed first; nothing moved, "
                "decide again on the new target"
            )
        entry = {"at": utc_now(), "who": actor or current_actor(), "model": self.model, "alias": alias,
                 "from": previous, "to": version, "why": str(reason), "action": action,
                 "move_id": uuid.uuid4().hex, "from_move": previous_move}
        while True:
            number = len(self._entries) + 1
            if self.store.create_entry(audit_key(self.model, number), sealed_json({**entry, "seq": number})):
                self._entries.append({**entry, "seq": number})
                return previous
            self._entries = self.store.audit_entries(self.model)  # another move took number k+1
            now = target(self._entries, alias)
            if now != (previous, previous_move) and self.decided:
                raise AliasMoved(
                    f"alias {alias!r} of model {self.model!r} moved to {now[0] or 'nothing'} (audit entry "
                    f"{len(self._entries)}) while this move to {version} was being decided; nothing moved: "
                    "read it again and decide on the new target"
                )
            previous, previous_move = now  # a plain set_alias decided nothing on what it read: move from here
            entry = {**entry, "from": previous, "from_move": previous_move}
