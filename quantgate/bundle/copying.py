"""Putting a version's files into a bundle's staging folder: stored files copied byte for byte and checked against
their stage's manifest, and the task's records (preprocessing, class names or characters) written beside them.

Shared by the bundle of one model (writer.py) and that of an OCR system (system_writer.py), whose components each
get these files in a folder of their own.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from quantgate.bundle.layout import (
    CLASSES_FILE,
    CLASSIFICATION,
    DICTIONARY_FILE,
    PREPROCESSING_FILE,
    TEXT_DETECTION,
    TEXT_RECOGNITION,
)
from quantgate.bundle.manifest import canonical_json, copy_hashed, write_new
from quantgate.bundle.sources import CannotBundle, VersionSources


def copy_stage_file(staging: Path, sources: VersionSources, stage: str, name: str, path: str) -> dict:
    """Copy `stage`/`name` of the version to `path` in the bundle; its {sha256, bytes}.

    Raises:
        CannotBundle: the bytes copied are not those the stage's manifest records (the file changed meanwhile).
    """
    sha256, size = copy_hashed(sources.folders[stage] / name, staging / path)
    recorded = sources.recorded_sha256(stage, name)
    if sha256 != recorded:
        raise CannotBundle(f"{sources.label} {stage}/{name} changed while it was copied (sha256 {sha256[:12]}…, "
                           f"recorded {recorded[:12]}…); run `quantgate fsck`; nothing was written")
    return {"sha256": sha256, "bytes": size}


def created_by() -> str:
    """bundle.json's "created_by": this quantgate's version."""
    return f"quantgate {importlib.metadata.version('quantgate')}"


def written(path: Path, data: bytes) -> dict:
    """Write the new file `path`; its {sha256, bytes}."""
    sha256, size = write_new(path, data)
    return {"sha256": sha256, "bytes": size}


def task_records(staging: Path, sources: VersionSources, folder: str = "") -> dict[str, dict]:
    """The data stage's preprocessing record and the task's names for the model's outputs, written under `folder`:
    {path: {sha256, bytes}}. A classifier gets classes.json, a recognizer characters.txt (its output ids as
    characters), a detector nothing more: its DB post-processing is part of the preprocessing record.

    Raises:
        CannotBundle: a record is missing, or differs from what the data stage recorded.
    """
    prefix = f"{folder}/" if folder else ""
    files = {f"{prefix}{PREPROCESSING_FILE}": written(staging / prefix / PREPROCESSING_FILE,
                                                      canonical_json(sources.preprocessing()))}
    task = sources.task
    if task == TEXT_RECOGNITION:
        files[f"{prefix}{DICTIONARY_FILE}"] = written(staging / prefix / DICTIONARY_FILE, sources.dictionary())
    elif task == CLASSIFICATION:
        files[f"{prefix}{CLASSES_FILE}"] = written(staging / prefix / CLASSES_FILE, canonical_json(sources.classes()))
    elif task != TEXT_DETECTION:
        raise CannotBundle(f"cannot bundle {sources.label}: its data stage's task {task!r} is not one this quantgate "
                           "bundles; upgrade quantgate")
    return files


def task_keys(task: str, folder: str = "") -> dict:
    """bundle.json's keys naming a model's task and the file that names its outputs (under `folder`). A classifier
    says no task: its bundle is the one from before tasks (format version 1)."""
    prefix = f"{folder}/" if folder else ""
    if task == TEXT_RECOGNITION:
        return {"task": task, "characters": f"{prefix}{DICTIONARY_FILE}"}
    if task == CLASSIFICATION:
        return {"classes": f"{prefix}{CLASSES_FILE}"}
    return {"task": task}
