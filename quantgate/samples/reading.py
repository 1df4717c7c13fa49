"""Reading a data stage's output: one interface for the in-memory datasets and for files on disk.

Every stage after `data` opens the data stage's folder with `open_data` and asks for batches of a
split. For image folders and text lines, `paddle.io.DataLoader` worker processes decode and transform
each file as it is needed (nothing holds all images), and each file is checked against the size,
mtime and sha256 the data stage recorded: a file changed since is named, never silently read. The
table's paths are relative to its roots, and the roots are this version's run's (`roots_read_from`):
a data stage reused from a run on another machine reads this machine's copy of the files.

For text recognition a batch's labels are the lines' dictionary ids padded with 0 (the CTC blank),
int64 [B, max_text_length]; `references` gives the label strings the predictions are compared with.
"""

from __future__ import annotations

import hashlib
import json
import signal
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import paddle

from quantgate.artifacts import recorded_config
from quantgate.config import AugmentConfig, TransformsConfig
from quantgate.lifetime import DataLoaderWorkerInit
from quantgate.samples.augment import augmented, image_rng
from quantgate.samples.errors import DataError
from quantgate.samples.file_table import FileRow, read_table
from quantgate.samples.image_folders import preprocess
from quantgate.samples.recorded_image import (
    FILE_CHANGED,
    FILE_UNREADABLE,
    ITEM_FAILED,
    READ_OK,
    RecordedImages,
    read_recorded,
    replay,
)
from quantgate.samples.text_reading import TextLineSplit
from quantgate.stages.data.outputs import DATASET_FILE, READ_FROM, SPLITS_FILE, TABLE_FILE
from quantgate.tasks import TEXT_DETECTION, TEXT_RECOGNITION, Task, task_of
from quantgate.tasks.text import encode

SPLIT_NAMES = ("train", "calibration", "validation", "test")


class DataChanged(DataError):
    """An image file differs from what the data stage recorded (or can no longer be read)."""


class _IndexBatches(paddle.io.BatchSampler):
    """Batches of row indices given by the caller (its own shuffle, or a DistributedBatchSampler)."""

    def __init__(self, batches: Iterable):
        self.batches = batches

    def __iter__(self):
        return (list(map(int, batch)) for batch in self.batches)

    def __len__(self):
        return len(self.batches)


class FileSplit(RecordedImages):
    """One split's image files: item `i` is (pixels float32 CHW, label, i, status); status says whether the
    file still matches the table. A bad file gives zeros and a status instead of raising, because an
    exception in a DataLoader worker reaches the main process without its message."""

    def __init__(self, rows: list[FileRow], roots: dict[str, str], transforms: TransformsConfig,
                 input_shape: tuple[int, ...], augment: AugmentConfig | None = None, seed: int = 0, epoch: int = 0):
        super().__init__(rows, roots)
        self.transforms = transforms
        self.input_shape, self.augment, self.seed, self.epoch = tuple(input_shape), augment, seed, epoch

    def prepare(self, index: int):
        row = self.rows[index]
        image = read_recorded(self.path(index), row, "L" if self.transforms.color == "grayscale" else "RGB")
        if isinstance(image, int):
            return self._failed(index, image)
        if self.augment is not None:
            image = augmented(image, self.transforms, self.augment, self.input_shape[1:],
                              image_rng(self.seed, self.epoch, index))
            pixels = preprocess(image, self.transforms.model_copy(update={"resize": None, "center_crop": None}))
        else:
            pixels = preprocess(image, self.transforms)
        if pixels.shape != self.input_shape:
            return self._failed(index, FILE_UNREADABLE)
        return pixels, np.int64(row.label), np.int64(index), np.int8(READ_OK)

    def _failed(self, index: int, status: int):
        return np.zeros(self.input_shape, np.float32), np.int64(-1), np.int64(index), np.int8(status)


@dataclass
class StoredData:
    """A data stage's output, opened for reading (see the module docstring)."""

    folder: Path
    spec: dict
    rows: dict[str, list[FileRow]] = field(default_factory=dict)  # image folders
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # the digits: x_<split>, y_<split>

    @property
    def num_classes(self) -> int:
        return int(self.spec["num_classes"])

    @property
    def classes(self) -> list[str]:
        """The class names (classification; empty for text recognition, whose outputs are `characters`)."""
        return list(self.spec.get("classes", []))

    @property
    def task(self) -> Task:
        return task_of(self.spec)

    @property
    def is_text(self) -> bool:
        return self.spec.get("task") == TEXT_RECOGNITION

    @property
    def is_detection(self) -> bool:
        """Pages with text boxes: a batch's labels are each page's geometry, its references the boxes' JSON."""
        return self.spec.get("task") == TEXT_DETECTION

    @property
    def characters(self) -> tuple[str, ...]:
        """Text recognition's dictionary: id i > 0 is characters[i - 1], 0 the CTC blank (empty otherwise)."""
        return tuple(self.spec.get("characters", ()))

    @property
    def max_text_length(self) -> int:
        return int(self.spec.get("max_text_length", 0))

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.spec["input_shape"])

    @property
    def on_disk(self) -> bool:
        """Whether the images are files read as needed (an image folder), not arrays in memory."""
        return self.spec["kind"] == "files"

    @property
    def digest(self) -> str:
        """sha256 of what identifies the data: the file table (or the arrays) and the dataset record."""
        digest = hashlib.sha256()
        for name in (DATASET_FILE, TABLE_FILE if self.on_disk else SPLITS_FILE):
            digest.update(hashlib.sha256((self.folder / name).read_bytes()).digest())
        return digest.hexdigest()

    def size(self, split: str) -> int:
        return len(self.rows[split]) if self.on_disk else len(self.arrays[f"y_{split}"])

    def labels(self, split: str) -> np.ndarray:
        """What a batch's labels hold, for the whole split: class indices, or padded ids [N, L] for text."""
        if not self.on_disk:
            return self.arrays[f"y_{split}"]
        if self.is_detection:
            raise ValueError("a detection split's labels are each page's geometry, known once the page is decoded: "
                             "read them from batches(); references() gives the boxes")
        if self.is_text:
            index = {character: position + 1 for position, character in enumerate(self.characters)}
            ids = [encode(row.label_name, index, self.max_text_length) for row in self.rows[split]]
            return np.stack(ids) if ids else np.zeros((0, self.max_text_length), np.int64)
        return np.asarray([row.label for row in self.rows[split]], dtype=np.int64)

    def references(self, split: str) -> np.ndarray:
        """What predictions of `split` are compared with: the label strings (a numpy unicode array) for text,
        the class indices for classification."""
        if not (self.is_text or self.is_detection):
            return self.labels(split)
        if self.on_disk:
            texts = [row.label_name for row in self.rows[split]]
            return np.asarray(texts, dtype=str) if texts else np.zeros(0, dtype="<U1")
        return self.arrays[f"text_{split}"]

    def files(self, split: str) -> list[str]:
        """Where each image of `split` lies, in order ("digits[<index>]" for the built-in digits)."""
        if self.on_disk:
            return [str(Path(self.spec["roots"][row.root]) / row.file) for row in self.rows[split]]
        return [f"{self.spec['dataset']}[{int(index)}]" for index in self.arrays[f"index_{split}"]]

    def split_digest(self, split: str) -> str:
        """sha256 of what decides a split's inputs: its rows (or arrays) and the transforms."""
        digest = hashlib.sha256(json.dumps(self.spec.get("transforms"), sort_keys=True).encode())
        if self.is_text:  # the dictionary decides the ids; a line's text is its label
            digest.update(json.dumps(self.characters).encode())
        if self.is_detection:  # the post-processing decides the boxes; a page's boxes are its label
            digest.update(json.dumps(self.spec.get("postprocess"), sort_keys=True).encode())
        if self.on_disk:
            for row in self.rows[split]:
                text = f"{row.label_name}\0" if self.is_text or self.is_detection else ""
                digest.update(f"{row.file}\0{row.label}\0{text}{row.sha256}\n".encode())
        else:
            for axis in "xy":
                digest.update(np.ascontiguousarray(self.arrays[f"{axis}_{split}"]).tobytes())
        return digest.hexdigest()

    def dataset(self, split: str, augment: bool = False, epoch: int = 0) -> FileSplit | TextLineSplit:
        """`split`'s files as a paddle.io.Dataset; `augment` applies the recorded training augmentation."""
        spec = self.spec
        if self.is_detection:  # nothing trains a detector here: pages are never augmented
            from quantgate.samples.pages import PageSplit

            return PageSplit(self.rows[split], spec["roots"], TransformsConfig.model_validate(spec["transforms"]))
        augmentation = AugmentConfig.model_validate(spec["augment"]) if augment else None
        if self.is_text:
            return TextLineSplit(self.rows[split], spec["roots"], TransformsConfig.model_validate(spec["transforms"]),
                                 self.characters, self.max_text_length,
                                 augmentation if augmentation and augmentation.active else None, spec["seed"], epoch)
        return FileSplit(self.rows[split], spec["roots"], TransformsConfig.model_validate(spec["transforms"]),
                         self.input_shape, augmentation if augmentation and augmentation.active else None,
                         spec["seed"], epoch)

    def fetch(self, split: str, index_batches: Iterable, num_workers: int = 0, augment: bool = False,
              epoch: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(images, labels) of each batch of row indices, in the order given.

        Raises:
            DataChanged: an image file differs from the table, vanished, or no longer decodes.
        """
        if not self.on_disk:
            for batch in index_batches:
                yield self.arrays[f"x_{split}"][batch], self.arrays[f"y_{split}"][batch]
            return
        dataset = self.dataset(split, augment, epoch)
        # No shared memory: a worker forked while another thread of this process held Paddle's allocator
        # lock deadlocks sending its first shared-memory batch (seen under gdb); pickled numpy batches
        # through a pipe never touch that allocator.
        loader = paddle.io.DataLoader(dataset, batch_sampler=_IndexBatches(index_batches), num_workers=num_workers,
                                      use_shared_memory=False, return_list=True,
                                      worker_init_fn=DataLoaderWorkerInit() if num_workers else None)
        batches = _start_workers(loader)
        try:
            # Tensors, or DenseTensors in static mode: np.asarray reads both
            for images, labels, rows, status in batches:
                status = np.asarray(status)
                if status.any():
                    first = np.flatnonzero(status)[0]
                    raise _changed(dataset, int(np.asarray(rows)[first]), int(status[first]))
                yield np.asarray(images), np.asarray(labels)
        finally:
            _stop_workers(batches)

    def batches(self, split: str, batch_size: int, num_workers: int = 0,
                limit: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`split` in order, `batch_size` images at a time (the first `limit` only, when given)."""
        count = self.size(split) if limit is None else min(limit, self.size(split))
        starts = range(0, count, batch_size)
        return self.fetch(split, [np.arange(start, min(start + batch_size, count)) for start in starts], num_workers)

    def array(self, split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The first `limit` images of `split` (all when None) in memory: for small splits and single batches."""
        parts = list(self.batches(split, 256, 0, limit))
        if not parts:
            labels = (0, self.max_text_length) if self.is_text else (0, 4) if self.is_detection else (0,)
            return np.zeros((0, *self.input_shape), np.float32), np.zeros(labels, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _stop_workers(batches) -> None:
    """Stop a DataLoader iterator's worker processes and reader thread now, even if it was left mid-way.

    Paddle stops them only at the end of an epoch or in the iterator's `__del__`, which never comes while its
    reader thread (whose target is the iterator's own method) is alive: a loop left by an exception (DataChanged)
    or by a consumer that stopped early kept its workers and thread for the life of the process. A long process
    (a worker serving runs, the test suite) then piled up forked copies of itself and forked new workers
    beside those threads. Paddle has no public close; a single-process iterator has no workers to stop.
    """
    shutdown = getattr(batches, "_try_shutdown_all", None)
    if shutdown is not None:
        shutdown()


def _start_workers(loader: paddle.io.DataLoader) -> Iterator:
    """`iter(loader)`, keeping this process's SIGCHLD disposition.

    Paddle installs a Python SIGCHLD handler with the first DataLoader that has workers and leaves it for the
    life of the process, so it runs whenever any child exits. With it in force a child's exit killed the
    interpreter: SIGSEGV sent by the kernel while delivering SIGCHLD (si_code SI_KERNEL, no address, no Python
    traceback), seen in processes that had run onnxruntime and OpenVINO models: the latency process, Prefect's
    server at exit, and tests/stages in one pytest process (in test_train_distributed.py, at the end of
    `reference_logits`, the main thread in waitpid for its DataLoader worker). Keeping it only while
    workers ran was not enough: a loop's own workers exit while it runs. Paddle does not need it: its reader
    thread checks the workers every 5 s while no batch comes and stops the loop when one died. Signal handlers
    can be changed from the main thread only; elsewhere this changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return iter(loader)
    previous = signal.getsignal(signal.SIGCHLD)
    try:
        return iter(loader)
    finally:
        signal.signal(signal.SIGCHLD, previous)


def _changed(dataset: FileSplit | TextLineSplit, index: int, status: int) -> DataError:
    path = dataset.path(index)
    if status == ITEM_FAILED:
        cause = replay(dataset.prepare, index)
        error = DataError(f"preparing image {path} failed: "
                          + (f"{type(cause).__name__}: {cause}" if cause is not None else
                             "in a DataLoader worker only (it worked when retried in the main process)")
                          + "; check the file and data.transforms / data.augment, or leave it out")
        error.__cause__ = cause
        return error
    if status == FILE_CHANGED:
        return DataChanged(f"image {path} changed after the data stage recorded it (its size or sha256 differ, or it "
                           "is gone); nothing was trained on other bytes: run again to record the folder as it is now")
    return DataChanged(f"image {path} can no longer be decoded to the recorded size; replace the file and run again")


def roots_read_from(folder: Path, recorded: dict[str, str]) -> dict[str, str]:
    """The folders a data stage's files are read from: those this version's run read (READ_FROM in the stage's
    config, in the manifest the store verified with the folder), else those `dataset.json` records (a folder
    outside a store, or a stage committed before READ_FROM). A reused stage's dataset.json names the folders of
    the run that computed it, perhaps another machine's mount of the same files."""
    read_from = (recorded_config(folder) or {}).get(READ_FROM)
    return {**recorded, **read_from} if isinstance(read_from, dict) else recorded


def open_data(folder: Path) -> StoredData:
    """Open a data stage's output folder; a file table's paths are taken relative to `roots_read_from`.

    Raises:
        DataError: the folder is not a data stage's output, or its file table cannot be read.
    """
    folder = Path(folder)
    try:
        spec = json.loads((folder / DATASET_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{folder} holds no readable {DATASET_FILE}; pass the data stage's folder") from exc
    if spec["kind"] == "files":
        spec["roots"] = roots_read_from(folder, spec["roots"])
        rows: dict[str, list[FileRow]] = {name: [] for name in SPLIT_NAMES}
        for row in read_table(folder / TABLE_FILE):
            rows[row.split].append(row)
        return StoredData(folder, spec, rows=rows)
    with np.load(folder / SPLITS_FILE, allow_pickle=False) as stored:
        return StoredData(folder, spec, arrays={name: stored[name] for name in stored.files})
