"""The test samples a report shows: the evaluate stage's predictions, and where INT8 and FP32 disagree.

Only the disagreeing rows the gallery draws are decoded (a few dozen images), never the whole test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.samples.reading import StoredData
from quantgate.stages.report.errors import ReportError

TEST_SPLIT = "test"
KEYS = ("labels", "fp32_pred", "int8_pred")


@dataclass(frozen=True)
class Predictions:
    """References and both models' predictions on the test split, in its order (ints, or unicode strings)."""

    references: np.ndarray
    fp32: np.ndarray
    int8: np.ndarray

    @property
    def disagreeing(self) -> np.ndarray:
        """Rows whose FP32 and INT8 predictions differ, in test order."""
        return np.flatnonzero(self.fp32 != self.int8)

    def shown(self, limit: int) -> np.ndarray:
        """At most `limit` disagreeing rows: first those INT8 got wrong and FP32 right (what quantization broke),
        then those INT8 fixed, then those both got wrong; test order within each."""
        rows = self.disagreeing
        fp32_right, int8_right = self.fp32[rows] == self.references[rows], self.int8[rows] == self.references[rows]
        rank = np.where(fp32_right & ~int8_right, 0, np.where(int8_right, 1, 2))
        return rows[np.argsort(rank, kind="stable")][:limit]


def read_predictions(path: Path, references: np.ndarray) -> Predictions:
    """The predictions file of the evaluate stage, checked against the data stage's test references.

    Raises:
        ReportError: the file is unreadable, lacks a key, or its rows are not the test split's.
    """
    try:
        with np.load(path, allow_pickle=False) as stored:
            missing = [key for key in KEYS if key not in stored.files]
            if missing:
                raise ReportError(f"{path} lacks {', '.join(missing)}: it is not an evaluate stage's predictions file")
            arrays = [stored[key] for key in KEYS]
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read the predictions {path} ({exc}); run the evaluate stage again") from exc
    lengths = {len(array) for array in arrays}
    if lengths != {len(references)}:
        raise ReportError(f"{path} holds {sorted(lengths)} predictions, the data stage's test split {len(references)} "
                          "samples: the evaluate stage did not run on this data")
    if not np.array_equal(arrays[0], references):
        raise ReportError(f"the references in {path} are not the data stage's test labels: the evaluate stage "
                          "ran on other data")
    return Predictions(*arrays)


def images_of(data: StoredData, rows: np.ndarray) -> np.ndarray:
    """The test images of `rows` (float32 [N, C, H, W], as the models saw them), and only those.

    Raises:
        DataChanged: an image file changed since the data stage recorded it.
    """
    if not len(rows):
        return np.zeros((0, *data.input_shape), np.float32)
    return np.concatenate([images for images, _ in data.fetch(TEST_SPLIT, [np.asarray(rows, np.int64)])])


def files_of(data: StoredData, rows: np.ndarray) -> list[str]:
    """Where each of `rows` of the test split comes from (a file path, or "<dataset>[<index>]")."""
    files = data.files(TEST_SPLIT)
    return [files[int(row)] for row in rows]
