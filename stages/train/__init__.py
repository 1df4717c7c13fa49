"""Train stage: AMP training (auto_cast + GradScaler) on 1 or N processes, keeping the float32 master weights."""

from quantgate.stages.train.errors import (
    DistributedTrainingFailed,
    ModelError,
    ResumeMismatch,
    TooManySkippedSteps,
    TrainingDiverged,
)
from quantgate.stages.train.loop import TrainResult, train
from quantgate.stages.train.outputs import OUTPUTS

__all__ = ["OUTPUTS", "DistributedTrainingFailed", "ModelError", "ResumeMismatch", "TooManySkippedSteps",
           "TrainResult", "TrainingDiverged", "train"]
