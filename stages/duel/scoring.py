"""Running the release's INT8 model on the candidate's test samples, each prepared by the release's own
recorded pre-processing from the raw files, in one runtime.

A file dataset is read again from its files (the candidate's file table: paths, sizes, mtimes) with the
release's transforms and input shape, so a release that resized or normalized differently sees what it
was built for. The built-in arrays keep no raw files: they can be scored only when the release's
pre-processing is the candidate's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from quantgate.errors import StageError
from quantgate.progress import Progress
from quantgate.runtimes.forms import RuntimeUnavailable, check_runtimes, library, model_forms, open_runner
from quantgate.runtimes.memory_fit import RUNNER_CEILING, runners_batch
from quantgate.samples.reading import StoredData
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.tasks import task_of

log = logging.getLogger(__name__)
TEST = "test"


class ReleaseIncomparable(StageError):
    """The release cannot be scored on the candidate's test samples (the reason is the message)."""


def preprocessing_of(spec: dict) -> dict:
    """What decides how a version turns a raw sample into its model's input."""
    keys = ("kind", "task", "dataset", "transforms", "input_shape", "classes", "characters", "max_text_length")
    return {key: spec.get(key) for key in keys}


def _reader(release_spec: dict, release_folder: Path, candidate: StoredData, rows: np.ndarray) -> StoredData:
    """The candidate's test rows `rows`, opened as the release would read them."""
    if not candidate.on_disk:
        same = all(release_spec.get(key) == candidate.spec.get(key) for key in ("kind", "dataset", "transforms",
                                                                                "input_shape"))
        if not same:
            raise ReleaseIncomparable(
                f"the release prepares its input differently ({_shown(release_spec)}) from this version's built-in "
                f"{candidate.spec.get('dataset')} ({_shown(candidate.spec)}), and built-in data keep no raw files to "
                "prepare again")
        arrays = {f"{axis}_{TEST}": candidate.arrays[f"{axis}_{TEST}"][rows] for axis in "xy"}
        return StoredData(candidate.folder, candidate.spec, arrays=arrays)
    spec = {**release_spec, "kind": "files", "roots": candidate.spec["roots"], "seed": release_spec.get("seed", 0)}
    if candidate.is_text:  # labels are only encoded, never scored, here: any character and length must fit
        labels = [row.label_name for row in candidate.rows[TEST]]
        known = list(release_spec.get("characters", []))
        spec["characters"] = known + sorted({c for label in labels for c in label} - set(known))
        spec["max_text_length"] = max([int(release_spec.get("max_text_length", 1)), *map(len, labels), 1])
    return StoredData(release_folder, spec, rows={TEST: [candidate.rows[TEST][int(row)] for row in rows]})


def _shown(spec: dict) -> str:
    return f"input {spec.get('input_shape')}, transforms {json.dumps(spec.get('transforms'), sort_keys=True)}"


def _batches(reader: StoredData, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    yield from reader.batches(TEST, batch_size)


def model_files_digest(runtime: str, convert_dir: Path, export_dir: Path | None, quantize_dir: Path | None) -> dict:
    """{file: sha256} of the release's INT8 model as `runtime` loads it."""
    form = model_forms((runtime,), convert_dir / FP32_FILE, convert_dir / INT8_FILE, export_dir, quantize_dir)
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in form[runtime]["int8"].files}


def score_release(runtime: str, release_spec: dict, release_data_dir: Path, convert_dir: Path,
                  export_dir: Path | None, quantize_dir: Path | None, candidate: StoredData, rows: np.ndarray,
                  batch_size: int | None, threads: int) -> np.ndarray:
    """The release's INT8 predictions (its task's: class indices in its own class order, or strings) on the
    candidate's test rows `rows`, in `runtime`, at `batch_size` (None: the largest that fits the memory budget).

    Raises:
        ReleaseIncomparable: the runtime is not installed, the release's model is missing, or its
            pre-processing cannot be applied to the candidate's samples.
        DataChanged: a candidate test file changed since its data stage recorded it.
        MemoryRefused: one sample does not fit the memory budget.
    """
    try:
        check_runtimes((runtime,))
        form = model_forms((runtime,), convert_dir / FP32_FILE, convert_dir / INT8_FILE, export_dir,
                           quantize_dir)[runtime]["int8"]
    except RuntimeUnavailable as exc:
        raise ReleaseIncomparable(f"the release cannot run in {runtime}: {exc}") from exc
    missing = [str(file) for file in form.files if not file.is_file()]
    if missing:
        raise ReleaseIncomparable(f"the release's INT8 model for {runtime} is missing ({', '.join(missing)})")
    reader = _reader(release_spec, release_data_dir, candidate, rows)
    input_shape = tuple(release_spec["input_shape"])
    batch_size = runners_batch(
        f"duel: the release in {runtime}", {(runtime, "int8"): form}, input_shape, threads, requested=batch_size,
        ceiling=RUNNER_CEILING, setting="evaluate.batch_size",
        subject=f"the release's INT8 model on inputs of {'x'.join(map(str, input_shape))}").batch_size
    shape = (batch_size, *input_shape)
    runner = open_runner(runtime, form, threads, shape)
    task = task_of(release_spec)
    progress = Progress(log, f"duel {runtime} batch", max(1, math.ceil(len(rows) / batch_size)), every_s=5.0)
    predicted = []
    for step, (images, labels) in enumerate(_batches(reader, batch_size), start=1):
        predicted.append(task.predict(runner(images), labels))
        progress.step(step)
    log.info("duel: scored the release on %d test samples in %s (%s)", len(rows), runtime, library(runtime))
    if not predicted:
        return np.zeros(0, dtype="<U1" if candidate.is_text or candidate.is_detection else np.int64)
    return np.concatenate(predicted)
