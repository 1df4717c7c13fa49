"""What happens to a finished version after its run: alias moves (audited) and later gate decisions.

Versions and stages are immutable; these are the store's only changes to a finished version's
standing. Every alias move happens inside `AliasMoves`, which holds the model's alias lock while
the caller reads the aliases and the audit log, decides, and moves: a decision taken on what was
read can never be overtaken by another process's move. A move appends its audit line (the commit
point) and then replaces the alias file; see aliases.py for how an interrupted move is finished.
A decision is a new numbered, write-once file beside the stages.
"""

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .aliases import committed_moves, current_target, write_alias
from .audit import alias_lock, append_line, current_actor, read_log, remove_line, torn_tail
from .decisions import append_decision
from .errors import AliasMoved, ArtifactCorrupt, ArtifactError, ArtifactNotFound
from .layout import AUDIT_FILE, VERSION_RECORD
from .manifest import OUT_OF_SPACE, to_json_safe, utc_now
from .names import VersionRef, check_alias
from .paths import aliases_dir, model_dir, relative, version_names
from .reading import verify_finalized_version
from .versions import find_version, is_finalized
from .writer import storage_error

# `expected_previous` left out: move whatever the alias holds.
ANY = object()


class AliasMoves:
    """The aliases and audit log of one model while its alias lock is held: read, decide, move.

    Get one from `ArtifactStore.alias_moves(model)`; everything read through it stays true until
    the block ends, because every other mover waits for the lock.
    """

    def __init__(self, root: Path, model: str):
        self.root, self.model = root, model
        self._log = model_dir(root, model) / AUDIT_FILE

    def current(self, alias: str) -> str | None:
        """The version `alias` points at now (an interrupted move counts as done); None if never set."""
        return self._target(check_alias(alias))[0]

    def history(self) -> list[dict]:
        """Every committed audit entry of the model, oldest first.

        Raises:
            ArtifactCorrupt: a committed line of the log is not a JSON object.
        """
        return read_log(self._log, self.root)

    def move(self, alias: str, version: str, reason: str = "", action: str = "set", actor: str | None = None,
             expected_previous: object = ANY) -> str | None:
        """Point `alias` at the finalized, intact `version` and audit it; return where it pointed before.

        Raises:
            AliasMoved: `alias` does not point at `expected_previous` (when given).
            the errors of ArtifactStore.set_alias.
        """
        check_alias(alias)
        _check_target(self.root, self.model, alias, version)
        previous, previous_move = self._target(alias)
        if expected_previous is not ANY and previous != expected_previous:
            raise AliasMoved(
                f"alias {alias!r} of model {self.model!r} points at {previous or 'nothing'}, not at "
                f"{expected_previous or 'nothing'} as expected: another move landed first; nothing moved, "
                "decide again on the new target"
            )
        try:
            self._commit(alias, version, str(reason), action, actor, previous, previous_move)
        except OSError as exc:
            if exc.errno in OUT_OF_SPACE:
                raise storage_error(exc, f"moving alias {alias!r} of model {self.model!r}") from exc
            raise ArtifactError(
                f"cannot move alias {alias!r} of model {self.model!r} in {model_dir(self.root, self.model)}: "
                f"{exc.strerror or exc}; nothing moved; check that the store is writable"
            ) from exc
        return previous

    def _target(self, alias: str) -> tuple[str | None, str | None]:
        try:
            version, move_id, _ = current_target(aliases_dir(self.root, self.model) / f"{alias}.json", self.root,
                                                 committed_moves(self._log, self.root))
        except ArtifactCorrupt:
            return None, None  # setting the alias again is how a damaged alias file is fixed
        return version, move_id

    def _commit(self, alias: str, version: str, reason: str, action: str, actor: str | None,
                previous: str | None, previous_move: str | None) -> None:
        torn = torn_tail(self._log)
        if torn is not None:  # a line a full disk tore was never committed; appending after it would bury it
            remove_line(self._log, torn)
        move_id = uuid.uuid4().hex
        start = append_line(self._log, {
            "at": utc_now(), "who": actor or current_actor(), "model": self.model, "alias": alias,
            "from": previous, "to": version, "why": reason, "action": action,
            "move_id": move_id, "from_move": previous_move,
        })
        try:
            write_alias(aliases_dir(self.root, self.model), self.model, alias, version, reason, previous, move_id)
        except BaseException as failure:
            try:  # the line is committed, but this process can still take it back: it holds the lock
                remove_line(self._log, start)
            except OSError as undo_failed:
                raise ArtifactError(
                    f"alias {alias!r} of model {self.model!r} moved from {previous or 'nothing'} to {version} in "
                    f"the audit log, but its alias file could not be rewritten ({failure}) nor the move taken "
                    f"back ({undo_failed}); readers follow the audit log, so {alias!r} is {version}"
                ) from failure
            raise


@contextmanager
def alias_moves(root: Path, model: str) -> Iterator[AliasMoves]:
    """Hold `model`'s alias lock for the block and yield its AliasMoves; see ArtifactStore.alias_moves."""
    folder = model_dir(root, model)
    if not folder.is_dir():
        raise ArtifactNotFound(f"model {model!r} has no versions in store {root}; run the pipeline first")
    with ExitStack() as stack:
        try:
            stack.enter_context(alias_lock(folder))
        except OSError as exc:
            raise ArtifactError(f"cannot lock the aliases of model {model!r} in {folder}: {exc.strerror or exc}; "
                                "check that the store is writable") from exc
        yield AliasMoves(root, model)


def _check_target(root: Path, model: str, alias: str, version: str) -> None:
    find_version(root, model, version)
    if not is_finalized(root, model, version):
        finalized = [v for v in version_names(root, model) if is_finalized(root, model, v)]
        raise ArtifactError(
            f"cannot point alias {alias!r} of model {model!r} at {version}: that version is not finalized "
            f"(no {VERSION_RECORD}); finalize it first or choose a finalized version "
            f"({', '.join(finalized) or 'none yet'})"
        )
    verify_finalized_version(root, find_version(root, model, version))


def move_alias(root: Path, model: str, alias: str, version: str, reason: str, action: str,
               actor: str | None, expected_previous: object = ANY) -> str | None:
    """Point `alias` at a finalized, intact `version` and audit the move; see ArtifactStore.set_alias."""
    check_alias(alias)
    find_version(root, model, version)  # an unknown model or version is refused without waiting for the lock
    with alias_moves(root, model) as moves:
        return moves.move(alias, version, reason, action, actor, expected_previous)


def record_decision(root: Path, ref: VersionRef, record: dict) -> str:
    """Append a gate decision to the existing version `ref`; see ArtifactStore.record_decision."""
    if not is_finalized(root, ref.model, ref.version):
        raise ArtifactError(
            f"model {ref.model!r} {ref.version} is not finalized; only a finished version can be decided again"
        )
    safe = dict(to_json_safe(record, "decision"), model=ref.model, version=ref.version, who=current_actor())
    try:
        return relative(root, append_decision(Path(ref.path), safe))
    except OSError as exc:
        raise ArtifactError(
            f"cannot record a decision for model {ref.model!r} {ref.version}: {exc.strerror or exc}; "
            "check that the store is writable"
        ) from exc
