"""The artifact store's error family.

Everything the store raises on purpose is an `ArtifactError`, so a caller can catch the
whole family in one place; the subclasses say what went wrong in terms a user can act on.
"""

from quantgate.errors import BadInput, QuantgateError


class ArtifactError(QuantgateError):
    """Base class for artifact store errors; the pipeline itself broke (exit code 3)."""


class ArtifactNotFound(ArtifactError):
    """A model, version, stage or alias the caller asked for does not exist."""


class ArtifactCorrupt(ArtifactError):
    """Stored bytes no longer match the digests recorded when they were committed.

    `kind` names the damage for fsck: missing-file, extra-file, hash-mismatch or malformed-manifest.
    """

    def __init__(self, message: str, kind: str = "malformed-manifest"):
        super().__init__(message)
        self.kind = kind


class ArtifactExists(ArtifactError):
    """The caller tried to write something that was already committed; committed data is immutable."""


class StoreNotWritable(ArtifactError, BadInput):
    """The store's root folder cannot be created or written (bad input: exit code 2)."""


class InvalidName(ArtifactError, BadInput):
    """A model, stage, alias or version name breaks the naming rules (bad input: exit code 2)."""


class StoreFull(ArtifactError, BadInput):
    """The store's disk, quota or file-size limit ran out while writing (exit code 2).

    What was half-written is removed; committed stages stay and a rerun reuses them.
    """


class AliasMoved(ArtifactError):
    """A compare-and-set alias move found the alias no longer at the expected version; nothing moved."""
