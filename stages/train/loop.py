"""Train stage: Paddle dynamic-graph training under auto_cast with dynamic loss scaling, checkpointed per epoch."""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import paddle
import paddle.nn.functional as F

from quantgate.config import TrainConfig
from quantgate.stages.data.splits import load_splits
from quantgate.stages.shared.progress import Progress
from quantgate.stages.train import amp
from quantgate.stages.train.checkpoint_state import file_sha256, load_training_state, save_training_state
from quantgate.stages.train.errors import ResumeMismatch, TrainingDiverged
from quantgate.stages.train.grad_step import BufferSnapshot, apply_update
from quantgate.stages.train.models import build_model
from quantgate.stages.train.op_precision import op_precision_record, operator_stats
from quantgate.stages.train.outputs import (
    OP_PRECISION_FILE,
    REFERENCE_LOGITS_FILE,
    STEPS_FILE,
    VISUALDL_DIR,
    WEIGHTS_FILE,
)
from quantgate.stages.train.scalars import write_visualdl_scalars
from quantgate.stages.train.scaler_accounting import STEP_COLUMNS, ScalerAccounting

ARCHITECTURE = "digits_cnn"  # the default of train.architecture

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    weights_file: str
    steps_file: str
    reference_logits_file: str
    metrics: dict


class DivergenceWatch:
    """Tracks consecutive non-finite losses; dynamic loss scaling may recover from a few, not from many."""

    def __init__(self, limit: int, learning_rate: float):
        self.limit = limit
        self.learning_rate = learning_rate
        self.streak = 0
        self.first_bad_step: int | None = None

    def observe(self, step: int, loss: float) -> None:
        if math.isfinite(loss):
            self.streak, self.first_bad_step = 0, None
            return
        self.streak += 1
        self.first_bad_step = self.first_bad_step or step
        if self.streak >= self.limit:
            raise TrainingDiverged(
                f"training diverged: the loss was NaN/inf for {self.streak} consecutive steps "
                f"(first at step {self.first_bad_step}, learning_rate={self.learning_rate}); "
                "lower train.learning_rate or train.amp.init_loss_scaling"
            )


def _batches(n: int, batch_size: int, rng: np.random.RandomState):
    order = rng.permutation(n)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def _check_finite(weights: dict[str, np.ndarray], learning_rate: float) -> None:
    bad = sorted(name for name, array in weights.items() if not np.isfinite(array).all())
    if bad:
        raise TrainingDiverged(
            f"training produced non-finite weights in {bad} (learning_rate={learning_rate}); "
            "lower train.learning_rate"
        )


def _reference_logits(weights, num_classes, input_shape, images, architecture: str = ARCHITECTURE) -> np.ndarray:
    """float32 eval-mode logits of the shipped weights, the reference the export is checked against."""
    model = build_model(architecture, num_classes, input_shape)
    model.set_state_dict({name: paddle.to_tensor(array) for name, array in weights.items()})
    model.eval()
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy().astype(np.float32)


class CheckpointSink(Protocol):
    """Gives a folder for checkpoint `name` that is committed atomically when the with-block ends."""

    def __call__(self, name: str) -> AbstractContextManager[Path]: ...


def checkpoint_name(epoch: int) -> str:
    return f"epoch-{epoch:04d}"


def train(config: TrainConfig, splits_path: Path, out_dir: Path, checkpoints: CheckpointSink | None = None,
          resume_from: Path | None = None) -> TrainResult:
    """Train `config.architecture` on the train split and write float32 weights (parameters and buffers such as
    BatchNorm statistics), per-step records and reference logits. With `config.nproc` > 1 the training runs
    data-parallel in that many processes (see train_distributed), without per-epoch checkpoints.

    With `checkpoints`, the full training state is saved after every epoch; with `resume_from`
    (a checkpoint folder whose sha256 the caller has verified), training continues after that
    checkpoint's epoch and ends with the same weights as an uninterrupted run.

    Raises:
        TrainingDiverged: the loss stayed non-finite for `max_nonfinite_steps` steps, or weights end non-finite.
        TooManySkippedSteps: more steps were skipped for inf/NaN gradients than `amp.max_skipped_ratio` allows.
        ResumeMismatch: `resume_from` was made with other settings or data, or holds every epoch already.
        ModelError: the architecture cannot be built.
        DistributedTrainingFailed: a rank failed, or the ranks ended with different weights.
    """
    if config.nproc > 1:
        from quantgate.stages.train.distributed import train_data_parallel

        if resume_from is not None:
            raise ResumeMismatch(f"train.nproc={config.nproc}: resuming continues single-process training only; "
                                 "resume with train.nproc=1")
        return train_data_parallel(config, splits_path, out_dir)  # no per-epoch checkpoints across processes
    splits = load_splits(splits_path)
    splits_sha256 = file_sha256(Path(splits_path))
    paddle.seed(config.seed)
    rng = np.random.RandomState(config.seed)
    model = build_model(config.architecture, splits.num_classes, splits.input_shape)
    optimizer = paddle.optimizer.Adam(learning_rate=config.learning_rate, parameters=model.parameters())
    model, optimizer = amp.decorate(model, optimizer, config.amp)
    scaler = amp.grad_scaler(config.amp)
    watch = DivergenceWatch(config.max_nonfinite_steps, config.learning_rate)
    steps_per_epoch = math.ceil(len(splits.y_train) / config.batch_size)
    start_epoch, rows = 0, []
    if resume_from is not None:
        point = load_training_state(resume_from, model, optimizer, scaler, config=config, splits_sha256=splits_sha256)
        rng.set_state(point.numpy_rng_state)
        start_epoch, rows, watch.streak = point.epoch, point.rows, point.divergence_streak
    accounting = ScalerAccounting(config, config.epochs * steps_per_epoch, scaler.is_enable(), rows)
    trainable = [param for param in model.parameters() if not param.stop_gradient]
    probe = amp.OutputDtypeProbe(model)
    model.train()

    step, started, ops = start_epoch * steps_per_epoch, time.perf_counter(), {}
    first_step = step
    samples_per_second: dict[int, float] = {}  # steps run by this process (a resumed run's earlier ones were not)
    progress = Progress(log, "train epoch", config.epochs)
    for epoch in range(start_epoch + 1, config.epochs + 1):
        epoch_started, epoch_losses = time.perf_counter(), []
        for batch in _batches(len(splits.y_train), config.batch_size, rng):
            step_started = time.perf_counter()
            images = paddle.to_tensor(splits.x_train[batch])
            labels = paddle.to_tensor(splits.y_train[batch])
            before = BufferSnapshot(model)
            with operator_stats() if step == first_step else nullcontext() as counted:
                with amp.autocast(config.amp):
                    loss = F.cross_entropy(model(images), labels)
            if step == first_step:
                probe.remove()  # one step is enough to see which precision the layers ran in
                ops = counted
            scale_used = amp.loss_scale(scaler)
            scaler.scale(loss).backward()
            outcome = apply_update(scaler, optimizer, trainable, config.grad_clip_norm, before)
            optimizer.clear_grad()
            step += 1
            samples_per_second[step] = len(batch) / (time.perf_counter() - step_started)
            loss_value = float(loss.astype("float32"))
            accounting.record(step, epoch, loss_value, scale_used, outcome.skipped,
                              outcome.grad_norm, outcome.grad_norm_clipped)
            watch.observe(step, loss_value)
            epoch_losses.append(loss_value)
        progress.step(epoch, f"loss {np.mean(epoch_losses):.4f}, "
                      f"{len(splits.y_train) / (time.perf_counter() - epoch_started):.0f} samples/s, "
                      f"loss scale {amp.loss_scale(scaler):g}")
        if checkpoints is not None:
            with checkpoints(checkpoint_name(epoch)) as folder:
                save_training_state(folder, model, optimizer, scaler, rng, config=config,
                                    splits_sha256=splits_sha256, epoch=epoch, rows=accounting.rows,
                                    divergence_streak=watch.streak)
    seconds = time.perf_counter() - started

    weights, weights_source = amp.float32_state(model, optimizer)
    _check_finite(weights, config.learning_rate)
    record = amp.amp_record(config.amp, scaler, probe)
    out_dir = Path(out_dir)
    np.savez(out_dir / WEIGHTS_FILE, **weights)
    np.save(out_dir / REFERENCE_LOGITS_FILE,
            _reference_logits(weights, splits.num_classes, splits.input_shape, splits.x_test, config.architecture))
    with open(out_dir / STEPS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        writer.writerows(row.as_tuple() for row in accounting.rows)
    write_visualdl_scalars(out_dir / STEPS_FILE, out_dir / VISUALDL_DIR, samples_per_second)
    (out_dir / OP_PRECISION_FILE).write_text(json.dumps(
        op_precision_record(ops, record.effective, record.reason, record.device), indent=2, sort_keys=True))

    rows = accounting.rows
    final_losses = [row.loss for row in rows[-steps_per_epoch:]]
    trained_epochs = config.epochs - start_epoch
    metrics = {
        "architecture": config.architecture,
        "num_classes": splits.num_classes,
        "input_shape": list(splits.input_shape),
        "steps": step,
        "final_epoch_loss_mean": float(np.mean(final_losses)),
        "train_seconds": seconds,
        "samples_per_second": len(splits.y_train) * trained_epochs / seconds,
        "loss_scale_final": amp.loss_scale(scaler),
        "scaler": accounting.summary(amp.loss_scale(scaler)),
        "resumed_from_epoch": start_epoch or None,
        "epochs_trained_in_this_run": trained_epochs,
        "amp": {**record.as_dict(), "weights_source": weights_source},
    }
    return TrainResult(WEIGHTS_FILE, STEPS_FILE, REFERENCE_LOGITS_FILE, metrics)
