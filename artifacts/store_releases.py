"""`ArtifactStore`'s alias and decision methods: moving `release` and `latest` (audited, compare-and-set), and the
gate decisions recorded after a version was finalized. A part of the one public entry point, kept in its own
file; `S3Store` overrides them for a bucket.
"""

from contextlib import AbstractContextManager
from pathlib import Path

from . import paths, releases
from .aliases import read_alias
from .audit import read_log
from .decisions import effective_verdict, read_decisions
from .layout import AUDIT_FILE
from .names import VersionRef, check_model


class AliasesAndDecisions:
    """Aliases, their audit log and later decisions of a store rooted at `self.root` (mixed into ArtifactStore,
    which supplies `root` and `_existing`)."""

    root: Path

    def _existing(self, version_ref: VersionRef) -> VersionRef:
        raise NotImplementedError

    def set_alias(self, model: str, alias: str, version: str, reason: str = "", action: str = "set",
                  actor: str | None = None, expected_previous: object = releases.ANY) -> str | None:
        """Point `alias` of `model` at a finalized, intact `version`; return where it pointed before.

        With `expected_previous` (a version, or None for "never set"), the move is a compare-and-set:
        it happens only if the alias still points there. The audit line (who, when, from, to, why,
        action) is written and fsynced before the alias file is replaced, both under the model's alias
        lock, so concurrent moves are serialized, each line's "from" is true, and a move interrupted
        between the two steps is finished by the next read (see artifacts/aliases.py).

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactNotFound: the version does not exist.
            AliasMoved: the alias does not point at `expected_previous`; nothing moved.
            ArtifactError: the version is not finalized yet, or the store is not writable.
            ArtifactCorrupt: a file of the version no longer matches its manifest.
            StoreFull: the store ran out of space; nothing moved and nothing was logged.
        """
        return releases.move_alias(self.root, model, alias, version, reason, action, actor, expected_previous)

    def alias_moves(self, model: str) -> AbstractContextManager[releases.AliasMoves]:
        """A block holding `model`'s alias lock to read aliases (`current`) and the audit log (`history`),
        decide, and `move`, atomically. Inside it, move with `moves.move`, not `set_alias`.

        Raises:
            ArtifactNotFound: the model has no versions.
            ArtifactError: the lock cannot be taken (an unwritable store).
        """
        return releases.alias_moves(self.root, check_model(model))

    def alias(self, model: str, alias: str) -> str | None:
        """The version `alias` of `model` points at, or None if the alias was never set.

        Raises:
            InvalidName: a name breaks the naming rules.
            ArtifactCorrupt: the alias file is not a valid alias record.
        """
        return read_alias(paths.alias_file(self.root, model, alias), self.root)

    def audit_log(self, model: str) -> list[dict]:
        """Every alias move of `model`, oldest first.

        Raises:
            InvalidName: `model` breaks the naming rules.
            ArtifactCorrupt: a committed line of the log is not a JSON object (a torn last line, which a
                full disk leaves and which was never committed, is skipped).
        """
        return read_log(paths.model_dir(self.root, model) / AUDIT_FILE, self.root)

    def record_decision(self, version_ref: VersionRef, record: dict) -> str:
        """Append a new gate decision to a finalized version; return its path relative to the store.

        The version's stages and version.json are not touched; decisions are numbered and write-once.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactError: the version is not finalized, or `record` is not JSON-safe.
        """
        return releases.record_decision(self.root, self._existing(version_ref), record)

    def decisions(self, version_ref: VersionRef) -> list[dict]:
        """Later gate decisions of a version, oldest first ([] if it was never decided again), each verified.

        Raises:
            ArtifactNotFound: the version does not exist.
            ArtifactCorrupt: a decision file is not the sealed record the store wrote (edited, damaged).
        """
        return read_decisions(Path(self._existing(version_ref).path), self.root)

    def release_verdict(self, version_ref: VersionRef) -> tuple[bool, str]:
        """Whether the version may become `release` (its newest verified decision passed) and why.

        Never raises for damage: anything unverifiable is a refusal, and the reason names it.
        """
        return effective_verdict(self.root, self._existing(version_ref))
