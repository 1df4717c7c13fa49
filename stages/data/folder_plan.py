"""Scan image folders into the data stage's file table: find, hash, check and split every file.

Runs before anything is stored or trained (the flow calls it first, and its content digest decides
whether an earlier data stage can be reused), so a bad folder fails the run before any work.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from quantgate.config import DataConfig
from quantgate.samples.errors import DataError
from quantgate.samples.file_hashes import FileFacts, HashState, scan_files
from quantgate.samples.file_table import FileRow, content_sha256, relative_files
from quantgate.samples.image_folders import find_images, output_shape
from quantgate.stages.data.locations import data_roots
from quantgate.stages.data.stratify import (
    SPLIT_NAMES,
    check_every_class,
    split_by_class_without_training,
    split_indices,
    split_with_test_folder,
)

SHOWN_BAD_FILES = 10


@dataclass(frozen=True)
class FolderPlan:
    """The file table of the configured folder(s), and what describes it."""

    rows: list[FileRow]  # in split order, then by place in the folder
    classes: tuple[str, ...]
    roots: dict[str, str]  # "path" / "test_path" -> absolute folder
    input_shape: tuple[int, ...]
    skipped: list[dict] = field(default_factory=list)  # {"file", "problem"} of each image left out

    @property
    def table_sha256(self) -> str:
        """sha256 of every row, sizes and mtimes included, and of the roots: equal only for the same files,
        untouched, in the same place (recorded in the manifest's source)."""
        rows = [[getattr(row, name) for name in row.__dataclass_fields__] for row in self.rows]
        return hashlib.sha256(json.dumps({"rows": rows, "roots": self.roots, "skipped": self.skipped},
                                         sort_keys=True).encode()).hexdigest()

    @property
    def content_sha256(self) -> str:
        """sha256 of the files' bytes and places in their folders, the classes and the images left out: equal for
        a copy of the folders anywhere, touched or not; the flow reuses an earlier data stage on it."""
        return content_sha256(self.rows, classes=list(self.classes), skipped=relative_files(self.skipped, self.roots))


def _scan(root_key: str, root: Path, state: HashState, config: DataConfig):
    """(classes, [(relative path, label, facts)], skipped) of one folder."""
    classes, found = find_images(root)
    try:
        facts = scan_files([path for path, _ in found], state, config.scan_workers)
    except OSError as exc:
        raise DataError(f"cannot read {exc.filename or exc}: {exc.strerror or exc}; fix the file's permissions, "
                        "or remove it, and run again") from exc
    good, bad = [], []
    prefix = len(str(root)) + 1  # relative paths by slicing: Path.relative_to costs more than hashing state lookups
    for path, label in found:
        fact: FileFacts = facts[path]
        if fact.problem is None:
            good.append((str(path)[prefix:].replace(os.sep, "/"), label, fact))
        else:
            bad.append({"file": str(path), "problem": fact.problem})
    if bad and config.on_bad_image == "error":
        shown = "; ".join(f"{item['file']} ({item['problem']})" for item in bad[:SHOWN_BAD_FILES])
        more = f" and {len(bad) - SHOWN_BAD_FILES} more" if len(bad) > SHOWN_BAD_FILES else ""
        raise DataError(f"{len(bad)} image(s) under data.{root_key} cannot be decoded: {shown}{more}; replace or "
                        "remove them, or set data.on_bad_image: skip to leave them out (they are listed)")
    emptied = sorted(set(classes) - {classes[label] for _, label, _ in good})
    if emptied:
        raise DataError(f"class(es) {emptied} under {root} have no readable image once the bad ones are skipped; "
                        "add images or remove the folder(s)")
    return classes, good, bad


def _shape(entries: list, config: DataConfig, root: Path) -> tuple[int, ...]:
    sizes = {(fact.width, fact.height) for _, _, fact in entries}  # a few distinct sizes, however many files
    shapes = {output_shape(width, height, config.transforms) for width, height in sizes}
    if len(shapes) > 1:
        raise DataError(
            f"images in {root} have different sizes after pre-processing ({', '.join(map(str, sorted(shapes)[:4]))}); "
            "set data.transforms.resize and/or data.transforms.center_crop to give them one size"
        )
    return shapes.pop()


def _named_classes(found: tuple[str, ...], entries: list, config: DataConfig, root: Path):
    """(classes, entries) with labels as positions in data.class_names when it is set (the folders may cover a
    subset of the model's classes), else the sorted folder names as found.

    Raises:
        DataError: a folder is not one of data.class_names.
    """
    if config.class_names is None:
        return found, entries
    unknown = [name for name in found if name not in config.class_names]
    if unknown:
        listed = ", ".join(map(repr, config.class_names[:20])) + (" ..." if len(config.class_names) > 20 else "")
        raise DataError(f"folder(s) {', '.join(map(repr, unknown))} under {root} are not in data.class_names "
                        f"({len(config.class_names)} classes: {listed}); rename the folders to the model's class "
                        "names or add them to data.class_names")
    position = {name: config.class_names.index(name) for name in found}
    return tuple(config.class_names), [(path, position[found[label]], fact) for path, label, fact in entries]


def plan_image_folders(config: DataConfig, state: HashState | None = None, training: bool = True) -> FolderPlan:
    """Find, hash, check and split the files of `data.path` (and `data.test_path`).

    Without `training` (a model trained elsewhere) nothing is split off for training, and the folders may hold
    a subset of data.class_names: a classifier is judged on the classes there are images of.

    Raises:
        DataError: a folder, class or image is unusable (each named), the folders' classes differ,
            images differ in size after the transforms, or a split cannot hold every class.
    """
    state = state or HashState(None)
    roots = {key: Path(folder) for key, folder in data_roots(config).items()}
    found, entries, skipped = _scan("path", roots["path"], state, config)
    classes, entries = _named_classes(found, entries, config, roots["path"])
    input_shape = _shape(entries, config, roots["path"])
    keys = ["path"] * len(entries)
    labels = np.asarray([label for _, label, _ in entries], dtype=np.int64)
    if config.test_path is None:
        indices = split_indices(labels, config) if training else split_by_class_without_training(labels, config)
    else:
        test_found, test_entries, test_skipped = _scan("test_path", roots["test_path"], state, config)
        if test_found != found and (training or config.class_names is None):
            raise DataError(f"the test folder's classes {list(test_found)} differ from the training folder's "
                            f"{list(found)}; give both folders the same class sub-folders")
        _, test_entries = _named_classes(test_found, test_entries, config, roots["test_path"])
        test_shape = _shape(test_entries, config, roots["test_path"])
        if test_shape != input_shape:
            raise DataError(f"test images are {test_shape} after pre-processing, training images {input_shape}; "
                            "set data.transforms.resize / center_crop")
        indices = split_with_test_folder(labels, len(test_entries), config) if training else \
            split_by_class_without_training(labels, config, len(test_entries))
        entries, keys, skipped = entries + test_entries, keys + ["test_path"] * len(test_entries), skipped + test_skipped
        labels = np.concatenate([labels, [label for _, label, _ in test_entries]]).astype(np.int64)
    if training:  # an imported classifier need not see every one of its classes
        check_every_class(labels, indices, len(classes), config)
    rows = [FileRow(split=name, root=keys[index], file=entries[index][0], label=int(labels[index]),
                    label_name=classes[labels[index]], size=entries[index][2].size,
                    mtime_ns=entries[index][2].mtime_ns, sha256=entries[index][2].sha256)
            for name in SPLIT_NAMES for index in indices[name]]
    return FolderPlan(rows, classes, {key: str(value) for key, value in roots.items()}, input_shape, skipped)
