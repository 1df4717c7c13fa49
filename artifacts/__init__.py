"""Versioned, content-hashed storage for quantgate's stage outputs, manifests and aliases.

The store is the only code that knows the on-disk layout; everything else passes refs and asks
the store for paths (`VersionRef.path`, `ArtifactStore.stage_dir`, `ArtifactStore.run_log_path`).
"""

from .checkpoints import CheckpointRef, CheckpointWriter
from .errors import ArtifactCorrupt, ArtifactError, ArtifactExists, ArtifactNotFound, InvalidName, StoreNotWritable
from .layout import LATEST, RELEASE, RUN_LOG_FILE
from .manifest import recorded_config
from .names import StageRef, VersionInfo, VersionRef
from .opening import is_s3, open_store
from .store import ArtifactStore
from .writer import StageWriter

__all__ = [
    "LATEST",
    "RELEASE",
    "RUN_LOG_FILE",
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
    "is_s3",
    "open_store",
    "recorded_config",
]
