"""Training scalars for VisualDL, written from the train stage's per-step records.

`visualdl --logdir <version>/train/vdl` shows loss, learning rate, loss scale, gradient norm,
skipped steps and samples/s per step. The log is written after training from steps.csv (plus
the per-step throughput measured in this process), so VisualDL shows the numbers the version stores.
"""

from __future__ import annotations

import csv
from pathlib import Path

from visualdl import LogWriter

VISUALDL_FILE = "vdlrecords.train.log"
# steps.csv column -> VisualDL tag; columns a steps.csv lacks are left out.
STEP_TAGS = {
    "loss": "train/loss",
    "learning_rate": "train/learning_rate",
    "loss_scale": "train/loss_scale",
    "grad_norm": "train/grad_norm",
    "skipped_total": "train/skipped_steps_total",
}
SAMPLES_PER_SECOND_TAG = "train/samples_per_second"


def write_visualdl_scalars(steps_csv: Path, logdir: Path, samples_per_second: dict[int, float]) -> None:
    """Write every step of `steps_csv`, and `samples_per_second` ({step: samples/s}), as VisualDL scalars."""
    with open(steps_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    Path(logdir).mkdir(parents=True, exist_ok=True)
    # file_name fixes the record file's name (VisualDL's default holds a timestamp).
    with LogWriter(logdir=str(logdir), file_name=VISUALDL_FILE) as writer:
        for row in rows:
            step = int(row["step"])
            for column, tag in STEP_TAGS.items():
                if column in row:
                    writer.add_scalar(tag=tag, step=step, value=float(row[column]))
            if step in samples_per_second:
                writer.add_scalar(tag=SAMPLES_PER_SECOND_TAG, step=step, value=float(samples_per_second[step]))
