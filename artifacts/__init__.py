"""Versioned, content-hashed storage for quantgate's stage outputs, manifests and aliases.

The store is the only code that knows the on-disk layout; everything else passes refs.
"""

from .checkpoints import CheckpointRef, CheckpointWriter
from .errors import ArtifactCorrupt, ArtifactError, ArtifactExists, ArtifactNotFound, InvalidName, StoreNotWritable
from .names import StageRef, VersionInfo, VersionRef
from .store import ArtifactStore
from .writer import StageWriter

__all__ = [
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactExists",
    "ArtifactNotFound",
    "ArtifactStore",
    "CheckpointRef",
    "CheckpointWriter",
    "InvalidName",
    "StageRef",
    "StageWriter",
    "StoreNotWritable",
    "VersionInfo",
    "VersionRef",
]
