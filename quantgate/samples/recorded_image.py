"""Reading one image file the data stage recorded, checked against its row of the file table first.

Shared by the image-folder and text-line datasets: a file whose size differs from the row, whose bytes no longer
hash to its sha256 (or that is gone) is FILE_CHANGED, one that no longer decodes is FILE_UNREADABLE. Only a file
whose mtime differs from the row's is hashed: a copy of the dataset on another machine, or a touched file, is
read when its bytes are the recorded ones (the data stage is reused on content, not on mtimes). The datasets
turn a status into zeros plus the status instead of raising, because an exception in a DataLoader worker
reaches the main process without its message (and in-process it stalled Paddle's DataLoader).
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import paddle
from PIL import Image

from quantgate.samples.file_hashes import DECODE_ERRORS
from quantgate.samples.file_table import FileRow

READ_OK, FILE_CHANGED, FILE_UNREADABLE = 0, 1, 2
# Any other exception while an item is prepared (augmenting, transforming). Raised inside Paddle's DataLoader it
# is lost: with worker processes the loader raises "Blocking queue is killed" without the message, and with
# none (num_workers 0) its reader thread dies and the loop waits forever. So the datasets return this status,
# and the caller prepares that one item again in its own process to raise the real error (`replay`).
ITEM_FAILED = 3


class RecordedImages(paddle.io.Dataset):
    """A split's recorded image files, as a paddle.io.Dataset: item `i` is `prepare(i)`, whose last field is a
    status. Subclasses prepare an item and say what a failed one looks like (`_failed`); an exception while
    preparing becomes ITEM_FAILED, for the caller to `replay`."""

    def __init__(self, rows: list[FileRow], roots: dict[str, str]):
        self.rows, self.roots = rows, roots

    def __len__(self) -> int:
        return len(self.rows)

    def path(self, index: int) -> Path:
        row = self.rows[index]
        return Path(self.roots[row.root]) / row.file

    def __getitem__(self, index: int):
        try:
            return self.prepare(index)
        except Exception:  # noqa: BLE001  (replayed by the caller, see ITEM_FAILED)
            return self._failed(index, ITEM_FAILED)

    def prepare(self, index: int) -> tuple:
        raise NotImplementedError

    def _failed(self, index: int, status: int) -> tuple:
        raise NotImplementedError


def replay(prepare: Callable[[int], tuple], index: int) -> BaseException | None:
    """The exception `prepare(index)` raises when run again here, in the caller's process (None if it does not)."""
    try:
        prepare(index)
    except Exception as exc:  # noqa: BLE001  (handed back to be raised with the file named)
        return exc
    return None


def read_recorded(path: Path, row: FileRow, mode: str) -> Image.Image | int:
    """The image at `path`, decoded and converted to `mode` ("RGB" or "L"), or FILE_CHANGED / FILE_UNREADABLE."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            if stat.st_size != row.size:
                return FILE_CHANGED
            source = handle
            if stat.st_mtime_ns != row.mtime_ns:  # untouched files are trusted on their stat; the others on their bytes
                data = handle.read()
                if hashlib.sha256(data).hexdigest() != row.sha256:
                    return FILE_CHANGED
                source = io.BytesIO(data)  # decoded from the very bytes that were hashed
            with Image.open(source) as image:
                image.load()
                return image.convert(mode)
    except FileNotFoundError:
        return FILE_CHANGED
    except DECODE_ERRORS:
        return FILE_UNREADABLE
