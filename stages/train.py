"""Train stage: Paddle dynamic-graph training under auto_cast with dynamic loss scaling."""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

from quantgate.config import TrainConfig
from quantgate.stages import amp
from quantgate.stages.data import load_splits
from quantgate.stages.errors import TrainingDiverged
from quantgate.stages.models import build_model

WEIGHTS_FILE = "weights.npz"
STEPS_FILE = "steps.csv"
REFERENCE_LOGITS_FILE = "reference_logits.npy"
ARCHITECTURE = "digits_cnn"


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


def _reference_logits(weights, num_classes, input_shape, images) -> np.ndarray:
    """float32 eval-mode logits of the shipped weights, the reference the export is checked against."""
    model = build_model(ARCHITECTURE, num_classes, input_shape)
    model.set_state_dict({name: paddle.to_tensor(array) for name, array in weights.items()})
    model.eval()
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy().astype(np.float32)


def train(config: TrainConfig, splits_path: Path, out_dir: Path) -> TrainResult:
    """Train the default CNN on the train split and write float32 weights, per-step records and reference logits.

    Raises:
        TrainingDiverged: the loss stayed non-finite for `max_nonfinite_steps` steps, or weights end non-finite.
    """
    splits = load_splits(splits_path)
    paddle.seed(config.seed)
    rng = np.random.RandomState(config.seed)
    model = build_model(ARCHITECTURE, splits.num_classes, splits.input_shape)
    optimizer = paddle.optimizer.Adam(learning_rate=config.learning_rate, parameters=model.parameters())
    model, optimizer = amp.decorate(model, optimizer, config.amp)
    scaler = amp.grad_scaler(config.amp)
    watch = DivergenceWatch(config.max_nonfinite_steps, config.learning_rate)
    probe = amp.OutputDtypeProbe(model)
    model.train()

    rows, step, started = [], 0, time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        for batch in _batches(len(splits.y_train), config.batch_size, rng):
            images = paddle.to_tensor(splits.x_train[batch])
            labels = paddle.to_tensor(splits.y_train[batch])
            with amp.autocast(config.amp):
                loss = F.cross_entropy(model(images), labels)
            if step == 0:
                probe.remove()  # one step is enough to see which precision the layers ran in
            scale_used = amp.loss_scale(scaler)
            scaler.scale(loss).backward()
            scaler.step(optimizer)  # skips the update when the scaled gradients overflowed
            scaler.update()
            optimizer.clear_grad()
            step += 1
            loss_value = float(loss.astype("float32"))
            rows.append((step, epoch, loss_value, scale_used, config.learning_rate))
            watch.observe(step, loss_value)
    seconds = time.perf_counter() - started

    weights, weights_source = amp.float32_state(model, optimizer)
    _check_finite(weights, config.learning_rate)
    record = amp.amp_record(config.amp, scaler, probe)
    out_dir = Path(out_dir)
    np.savez(out_dir / WEIGHTS_FILE, **weights)
    np.save(out_dir / REFERENCE_LOGITS_FILE, _reference_logits(weights, splits.num_classes, splits.input_shape, splits.x_test))
    with open(out_dir / STEPS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "epoch", "loss", "loss_scale", "learning_rate"])
        writer.writerows(rows)

    final_losses = [row[2] for row in rows[-max(1, len(rows) // config.epochs) :]]
    metrics = {
        "architecture": ARCHITECTURE,
        "num_classes": splits.num_classes,
        "input_shape": list(splits.input_shape),
        "steps": step,
        "final_epoch_loss_mean": float(np.mean(final_losses)),
        "train_seconds": seconds,
        "samples_per_second": len(splits.y_train) * config.epochs / seconds,
        "loss_scale_final": amp.loss_scale(scaler),
        "amp": {**record.as_dict(), "weights_source": weights_source},
    }
    return TrainResult(WEIGHTS_FILE, STEPS_FILE, REFERENCE_LOGITS_FILE, metrics)
