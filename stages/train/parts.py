"""What a single-process run (`loop`) and a data-parallel run (`distributed`) of the train stage share: the result,
the divergence watch, the finite-weights check, the network to train and the reference logits it is exported
against, and the manifest's records of the model and the data."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import paddle

from quantgate.config import AugmentConfig, TrainConfig
from quantgate.models.models import DEFAULT_NECK, RECOGNIZER, build_model, check_text_outputs, load_weights
from quantgate.samples.augment import augmentation_record
from quantgate.samples.reading import StoredData
from quantgate.stages.train.errors import TrainingDiverged
from quantgate.stages.train.losses import TaskLoss
from quantgate.stages.train.outputs import AUGMENTATION, DATA_LOADER, NECK, TASK
from quantgate.tasks import TEXT_RECOGNITION

ARCHITECTURE = "digits_cnn"  # the default of train.architecture
REFERENCE_BATCH = 256  # test images per forward pass of the reference logits


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


def check_finite(weights: dict[str, np.ndarray], learning_rate: float) -> None:
    bad = sorted(name for name, array in weights.items() if not np.isfinite(array).all())
    if bad:
        raise TrainingDiverged(
            f"training produced non-finite weights in {bad} (learning_rate={learning_rate}); "
            "lower train.learning_rate"
        )


def reference_logits(weights: dict[str, np.ndarray], data: StoredData, architecture: str = ARCHITECTURE,
                     num_workers: int = 0, neck: str = DEFAULT_NECK) -> np.ndarray:
    """float32 eval-mode outputs of the shipped weights on the test split (never augmented), read batch by
    batch: the reference the export is checked against. [N, classes] for a classifier, [N, T, C] for a
    text recognizer.

    Raises:
        DataChanged: a test image changed since the data stage.
        ModelError: the weights do not fit the network (another architecture or neck).
    """
    model = load_weights(build_model(architecture, data.num_classes, data.input_shape, neck), weights, architecture)
    logits = []
    with paddle.no_grad():
        for images, _ in data.batches("test", REFERENCE_BATCH, num_workers):
            logits.append(model(paddle.to_tensor(images)).numpy().astype(np.float32))
        if not logits:  # an empty split: no rows, but the output's shape all the same
            logits.append(model(paddle.zeros([1, *data.input_shape])).numpy().astype(np.float32)[:0])
    return np.concatenate(logits)


def build_training_model(config: TrainConfig, data: StoredData, loss: TaskLoss) -> paddle.nn.Layer:
    """The network to train on `data`; a text recognizer is checked to return [N, T, classes] first.

    Raises:
        ModelError: the architecture cannot be built, or a text model returns another shape.
    """
    model = build_model(config.architecture, data.num_classes, data.input_shape, config.neck)
    if loss.task == TEXT_RECOGNITION:  # CTC needs [N, T, C] with a frame per label character
        check_text_outputs(model, config.architecture, data.num_classes, data.input_shape,
                           int(data.spec.get("max_text_length", 0)))
    return model


def model_records(config: TrainConfig, loss: TaskLoss) -> dict:
    """What the manifest says about the network beyond its architecture: the task it was trained for, and
    the built-in recognizer's neck (which export must build again)."""
    return {TASK: loss.task, NECK: config.neck if config.architecture == RECOGNIZER else None}


def data_records(data: StoredData, num_workers: int) -> dict:
    """What the manifest says about how the training data were read and augmented."""
    # The digits' record has no augmentation: nothing to apply, so the default (all off) describes it.
    augment = AugmentConfig.model_validate(data.spec.get("augment") or {})
    return {DATA_LOADER: {"num_workers": num_workers, "on_disk": data.on_disk},
            AUGMENTATION: augmentation_record(augment, int(data.spec["seed"]))}
