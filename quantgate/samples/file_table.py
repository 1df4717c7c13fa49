"""The data stage's record of a folder dataset: one row per image file, never its pixels.

`files.csv.gz` holds, per file: the split, which root it lies under (`path` or `test_path`), its path
relative to that root, its label and class, and its size, mtime and sha256 when the data stage read it.
The gzip header carries no time and no name, so equal tables are equal bytes (and equal digests).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from quantgate.samples.errors import DataError


@dataclass(frozen=True)
class FileRow:
    split: str
    root: str  # "path" or "test_path": the config key of the folder the file lies under
    file: str  # relative to that folder, POSIX separators
    label: int
    label_name: str
    size: int
    mtime_ns: int
    sha256: str


COLUMNS = tuple(field.name for field in fields(FileRow))
INTEGER_COLUMNS = ("label", "size", "mtime_ns")
# What a row says about the data itself; a copy of the folder elsewhere has the same, but other mtimes.
CONTENT_COLUMNS = ("split", "root", "file", "label", "label_name", "sha256")


def write_table(path: Path, rows: list[FileRow]) -> None:
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(astuple(row) for row in rows)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
        packed.write(text.getvalue().encode("utf-8"))


def read_table(path: Path) -> list[FileRow]:
    """The rows of a table written by `write_table`.

    Raises:
        DataError: the table is not one (wrong columns or values).
    """
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = tuple(next(reader))
            if header != COLUMNS:
                raise ValueError(f"columns {header}, expected {COLUMNS}")
            rows = []
            for values in reader:
                record = dict(zip(COLUMNS, values, strict=True))
                for name in INTEGER_COLUMNS:
                    record[name] = int(record[name])
                rows.append(FileRow(**record))
            return rows
    except (OSError, ValueError, StopIteration, EOFError) as exc:
        raise DataError(f"the file table {path} cannot be read ({exc}); run the data stage again") from exc


def content_fingerprint(rows: list[FileRow], identity: dict) -> str:
    """sha256 of what the data *is*: every file's split, place in its folder, label and bytes, plus `identity`
    (dataset kind, classes, transforms). Sizes and times are left out: a copied or touched folder with
    the same bytes is the same dataset; where the folders lie is left out for the same reason."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode())
    for row in rows:
        digest.update(f"{row.split}\0{row.root}\0{row.file}\0{row.label}\0{row.sha256}\n".encode())
    return digest.hexdigest()


def content_sha256(rows: list[FileRow], **described) -> str:
    """sha256 of what a scanned table *is*, which decides whether an earlier data stage is reused: each row's
    split, root key, path relative to that root, label and bytes (CONTENT_COLUMNS), plus `described` (classes,
    dictionary, label files' digests, what was left out). Where the roots lie and the files' mtimes are left
    out: a copy of the dataset under another folder, on another machine, is the same data."""
    table = [[getattr(row, name) for name in CONTENT_COLUMNS] for row in rows]
    return hashlib.sha256(json.dumps({"rows": table, **described}, sort_keys=True).encode()).hexdigest()


def relative_files(items: list[dict], roots: dict[str, str]) -> list[dict]:
    """`items` ({"file": an absolute path under one of `roots`, ...}) with each file as `<root key>:<relative
    path>`, for digests that must not depend on where the roots lie; the innermost root wins."""
    ordered = sorted(roots.items(), key=lambda item: len(item[1]), reverse=True)
    relative = []
    for item in items:
        file = item["file"]
        key, root = next(((key, root) for key, root in ordered if file.startswith(root + os.sep)), (None, ""))
        place = f"{key}:{file[len(root) + 1:].replace(os.sep, '/')}" if key else file  # outside every root: as is
        relative.append({**item, "file": place})
    return relative
