"""Train stage: Paddle dynamic-graph training under auto_cast with dynamic loss scaling, checkpointed per epoch.

The training data are read batch by batch from the data stage's folder (`StoredData.fetch`): image
folders are decoded by paddle.io.DataLoader worker processes, with the data stage's training
augmentation, so memory does not grow with the number of images.
"""

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

from quantgate.config import TrainConfig
from quantgate.progress import Progress
from quantgate.samples.reading import StoredData, open_data
from quantgate.stages.train import amp
from quantgate.stages.train.checkpoint_state import (
    CheckpointBytes,
    load_training_state,
    save_training_state,
)
from quantgate.stages.train.errors import ResumeMismatch, WarmStartMismatch
from quantgate.stages.train.grad_step import BufferSnapshot, StepOutcome, apply_update
from quantgate.stages.train.losses import TaskLoss, loss_for
from quantgate.stages.train.op_precision import op_precision_record, operator_stats
from quantgate.stages.train.outputs import (
    INIT_FROM,
    OP_PRECISION_FILE,
    REFERENCE_LOGITS_FILE,
    STEPS_FILE,
    VISUALDL_DIR,
    WEIGHTS_FILE,
)
from quantgate.stages.train.parts import (
    DivergenceWatch,
    TrainResult,
    build_training_model,
    check_finite,
    data_records,
    model_records,
    reference_logits,
)
from quantgate.stages.train.scalars import write_visualdl_scalars
from quantgate.stages.train.scaler_accounting import STEP_COLUMNS, ScalerAccounting
from quantgate.stages.train.warm_start import InitWeights, start_from

log = logging.getLogger(__name__)


def epoch_batches(n: int, batch_size: int, rng: np.random.RandomState) -> list[np.ndarray]:
    """One epoch's batches of row indices: a permutation drawn from `rng` (checkpointed, so a resumed run
    draws the same ones), cut into `batch_size` pieces."""
    order = rng.permutation(n)
    return [order[start : start + batch_size] for start in range(0, n, batch_size)]


class CheckpointSink(Protocol):
    """Gives a folder for checkpoint `name` that is committed atomically when the with-block ends."""

    def __call__(self, name: str) -> AbstractContextManager[Path]: ...


def checkpoint_name(epoch: int) -> str:
    return f"epoch-{epoch:04d}"


def train(config: TrainConfig, data_dir: Path, out_dir: Path, checkpoints: CheckpointSink | None = None,
          resume_from: CheckpointBytes | None = None, num_workers: int = 0,
          init_weights: InitWeights | None = None) -> TrainResult:
    """Train `config.architecture` on the train split of the data stage's folder `data_dir` and write float32
    weights (parameters and buffers such as BatchNorm statistics), per-step records and reference logits.
    The loss is the data's task's (`losses.loss_for`): cross-entropy, or CTC in float32 for text recognition.
    With `config.nproc` > 1 the training runs data-parallel in that many processes (see distributed), without
    per-epoch checkpoints. Image folders are decoded by `num_workers` DataLoader processes (0: in this one),
    training images with the data stage's augmentation.

    With `checkpoints`, the full training state is saved after every epoch (no pickle: .npz, JSON,
    CSV); with `resume_from` (the bytes of a checkpoint the caller has verified, as read for the
    check), training continues after that checkpoint's epoch and ends with the same weights as an
    uninterrupted run. With `init_weights` (train.init_from, read by the caller), training starts from
    those weights instead of freshly initialised ones (see warm_start); the manifest's `init_from` says
    which keys, if any, started fresh.

    Raises:
        TrainingDiverged: the loss stayed non-finite for `max_nonfinite_steps` steps, or weights end non-finite.
        TooManySkippedSteps: more steps were skipped for inf/NaN gradients than `amp.max_skipped_ratio` allows.
        ResumeMismatch: `resume_from` was made with other settings or data, holds every epoch already,
            or is not a checkpoint this quantgate writes; or it is given together with `init_weights`.
        WarmStartMismatch: `init_weights` do not fit the model (strict: any key missing, unexpected or
            mis-shaped; otherwise: no key fits), or are given with `config.nproc` > 1.
        ModelError: the architecture cannot be built, or a text recognizer does not return [N, T, classes]
            logits with a frame per label character.
        DataError: `data_dir` is not a data stage's folder.
        DataChanged: an image file changed since the data stage recorded it.
        DistributedTrainingFailed: a rank failed, or the ranks ended with different weights.
        RankDataMismatch: a rank read other data than this process.
    """
    if resume_from is not None and init_weights is not None:
        raise ResumeMismatch("a resumed run continues its checkpoint's weights, a warm start begins from "
                             "train.init_from's: pick one (drop --resume, or unset train.init_from)")
    if config.nproc > 1 and init_weights is not None:
        raise WarmStartMismatch(f"train.init_from warm-starts single-process training only (train.nproc="
                                f"{config.nproc}); set train.nproc: 1")
    if config.nproc > 1:
        from quantgate.stages.train.distributed import train_data_parallel

        if resume_from is not None:
            raise ResumeMismatch(f"train.nproc={config.nproc}: resuming continues single-process training only; "
                                 "resume with train.nproc=1")
        return train_data_parallel(config, data_dir, out_dir, num_workers)  # no per-epoch checkpoints
    run = _set_up(config, open_data(data_dir), resume_from, num_workers, init_weights)
    epochs = _run_epochs(run, checkpoints)
    weights_source, record = _write_outputs(run, epochs, Path(out_dir))
    return TrainResult(WEIGHTS_FILE, STEPS_FILE, REFERENCE_LOGITS_FILE, _metrics(run, epochs, record, weights_source))


@dataclass
class _TrainingRun:
    """What a single-process training run steps: built from the seed, or restored from a checkpoint."""

    config: TrainConfig
    data: StoredData
    num_workers: int
    model: paddle.nn.Layer
    optimizer: paddle.optimizer.Optimizer
    scaler: paddle.amp.GradScaler
    rng: np.random.RandomState
    watch: DivergenceWatch
    accounting: ScalerAccounting
    trainable: list
    probe: amp.OutputDtypeProbe
    steps_per_epoch: int
    start_epoch: int
    loss: TaskLoss
    init_record: dict | None  # what a warm start loaded (None: a cold start or a resumed run)


@dataclass(frozen=True)
class _EpochsRun:
    """What the epochs of this process did (a resumed run's earlier ones were not run here)."""

    steps: int  # the step count reached, earlier runs' steps included
    seconds: float
    ops: dict  # operators of the first step run here, by precision
    samples_per_second: dict[int, float]  # by step


def _set_up(config: TrainConfig, data: StoredData, resume_from: CheckpointBytes | None,
            num_workers: int, init_weights: InitWeights | None = None) -> _TrainingRun:
    """Seed, build the model (from `init_weights` if given), optimizer and loss scaler, and restore
    `resume_from`'s state if given."""
    paddle.seed(config.seed)
    rng = np.random.RandomState(config.seed)
    loss = loss_for(data.spec)
    model = build_training_model(config, data, loss)
    # Before O2 casts the parameters: the optimizer's float32 master weights are taken from these.
    init_record = start_from(model, init_weights, config.architecture) if init_weights is not None else None
    optimizer = paddle.optimizer.Adam(learning_rate=config.learning_rate, parameters=model.parameters())
    model, optimizer = amp.decorate(model, optimizer, config.amp)
    scaler = amp.grad_scaler(config.amp)
    watch = DivergenceWatch(config.max_nonfinite_steps, config.learning_rate)
    steps_per_epoch = math.ceil(data.size("train") / config.batch_size)
    start_epoch, rows = 0, []
    if resume_from is not None:
        point = load_training_state(resume_from, model, optimizer, scaler, config=config, data_sha256=data.digest)
        rng.set_state(point.numpy_rng_state)
        start_epoch, rows, watch.streak = point.epoch, point.rows, point.divergence_streak
    accounting = ScalerAccounting(config, config.epochs * steps_per_epoch, scaler.is_enable(), rows)
    trainable = [param for param in model.parameters() if not param.stop_gradient]
    probe = amp.OutputDtypeProbe(model)
    model.train()
    return _TrainingRun(config, data, num_workers, model, optimizer, scaler, rng, watch, accounting, trainable,
                        probe, steps_per_epoch, start_epoch, loss, init_record)


def _train_step(
    run: _TrainingRun, images: np.ndarray, labels: np.ndarray, count_ops: bool
) -> tuple[paddle.Tensor, float, StepOutcome, dict | None]:
    """One AMP step on a batch: the loss, the loss scale it was multiplied by, the update's outcome, and
    (with `count_ops`) the operators the forward pass ran."""
    images, labels = paddle.to_tensor(images), paddle.to_tensor(labels)
    before = BufferSnapshot(run.model)
    with operator_stats() if count_ops else nullcontext() as counted:
        with amp.autocast(run.config.amp, run.loss.float32_ops):
            loss = run.loss(run.model(images), labels)
    if count_ops:
        run.probe.remove()  # one step is enough to see which precision the layers ran in
    scale_used = amp.loss_scale(run.scaler)
    run.scaler.scale(loss).backward()
    outcome = apply_update(run.scaler, run.optimizer, run.trainable, run.config.grad_clip_norm, before)
    run.optimizer.clear_grad()
    return loss, scale_used, outcome, counted


def _run_epochs(run: _TrainingRun, checkpoints: CheckpointSink | None) -> _EpochsRun:
    """The epochs after `run.start_epoch`, each followed by a checkpoint when `checkpoints` is given."""
    config = run.config
    step, started, ops = run.start_epoch * run.steps_per_epoch, time.perf_counter(), {}
    first_step = step
    samples_per_second: dict[int, float] = {}  # steps run by this process (a resumed run's earlier ones were not)
    progress = Progress(log, "train epoch", config.epochs)
    samples = run.data.size("train")
    for epoch in range(run.start_epoch + 1, config.epochs + 1):
        epoch_started, epoch_losses = time.perf_counter(), []
        index_batches = epoch_batches(samples, config.batch_size, run.rng)
        for images, labels in run.data.fetch("train", index_batches, num_workers=run.num_workers, augment=True,
                                             epoch=epoch):
            step_started = time.perf_counter()  # the step alone: decoding runs ahead in the workers
            loss, scale_used, outcome, counted = _train_step(run, images, labels, count_ops=step == first_step)
            if step == first_step:
                ops = counted
            step += 1
            samples_per_second[step] = len(labels) / (time.perf_counter() - step_started)
            loss_value = float(loss.astype("float32"))
            run.accounting.record(step, epoch, loss_value, scale_used, outcome.skipped,
                                  outcome.grad_norm, outcome.grad_norm_clipped)
            run.watch.observe(step, loss_value)
            epoch_losses.append(loss_value)
        progress.step(epoch, f"loss {np.mean(epoch_losses):.4f}, "
                      f"{samples / (time.perf_counter() - epoch_started):.0f} samples/s, "
                      f"loss scale {amp.loss_scale(run.scaler):g}")
        if checkpoints is not None:
            with checkpoints(checkpoint_name(epoch)) as folder:
                save_training_state(folder, run.model, run.optimizer, run.scaler, run.rng, config=config,
                                    data_sha256=run.data.digest, epoch=epoch, rows=run.accounting.rows,
                                    divergence_streak=run.watch.streak)
    return _EpochsRun(step, time.perf_counter() - started, ops, samples_per_second)


def _write_outputs(run: _TrainingRun, epochs: _EpochsRun, out_dir: Path) -> tuple[str, amp.AmpRecord]:
    """Write the weights, reference logits, step records, VisualDL scalars and operator precisions;
    returns where the float32 weights came from and the AMP record.

    Raises:
        TrainingDiverged: a weight ended non-finite (nothing is written then).
    """
    config = run.config
    weights, weights_source = amp.float32_state(run.model, run.optimizer)
    check_finite(weights, config.learning_rate)
    record = amp.amp_record(config.amp, run.scaler, run.probe, run.loss.float32_ops)
    np.savez(out_dir / WEIGHTS_FILE, **weights)
    np.save(out_dir / REFERENCE_LOGITS_FILE,
            reference_logits(weights, run.data, config.architecture, run.num_workers, config.neck))
    with open(out_dir / STEPS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        writer.writerows(row.as_tuple() for row in run.accounting.rows)
    write_visualdl_scalars(out_dir / STEPS_FILE, out_dir / VISUALDL_DIR, epochs.samples_per_second)
    (out_dir / OP_PRECISION_FILE).write_text(json.dumps(
        op_precision_record(epochs.ops, record.effective, record.reason, record.device, record.task_black_list),
        indent=2, sort_keys=True))
    return weights_source, record


def _metrics(run: _TrainingRun, epochs: _EpochsRun, record: amp.AmpRecord, weights_source: str) -> dict:
    """The train stage's metrics for the manifest."""
    config, data, scaler = run.config, run.data, run.scaler
    final_losses = [row.loss for row in run.accounting.rows[-run.steps_per_epoch:]]
    trained_epochs = config.epochs - run.start_epoch
    return {
        "architecture": config.architecture,
        **model_records(config, run.loss),
        "num_classes": data.num_classes,
        "input_shape": list(data.input_shape),
        "steps": epochs.steps,
        "final_epoch_loss_mean": float(np.mean(final_losses)),
        "train_seconds": epochs.seconds,
        "samples_per_second": data.size("train") * trained_epochs / epochs.seconds,  # reading included
        "loss_scale_final": amp.loss_scale(scaler),
        "scaler": run.accounting.summary(amp.loss_scale(scaler)),
        "resumed_from_epoch": run.start_epoch or None,
        "epochs_trained_in_this_run": trained_epochs,
        INIT_FROM: run.init_record,
        "amp": {**record.as_dict(), "weights_source": weights_source},
        **data_records(data, run.num_workers),
    }
