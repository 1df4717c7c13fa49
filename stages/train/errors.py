"""The train stage's errors; each message names the bad value and the fix."""

from quantgate.errors import BadInput, StageError
from quantgate.models.errors import ModelError as ModelError  # the train stage raises it too


class DistributedTrainingFailed(StageError):
    """A rank of the multi-process training failed, or the ranks ended with different weights."""


class TrainingDiverged(StageError, BadInput):
    """The loss stayed non-finite, or the trained weights are not finite."""


class TooManySkippedSteps(TrainingDiverged):
    """More steps than `train.amp.max_skipped_ratio` allows were skipped for inf/NaN gradients."""


class ResumeMismatch(StageError, BadInput):
    """A checkpoint cannot continue this run: other settings, other data, or nothing left to train."""


class RankDataMismatch(StageError, BadInput):
    """A rank of a multi-process run reads other data than the process that launched it."""


class WarmStartMismatch(StageError, BadInput):
    """The weights of train.init_from cannot be read without running code, or do not fit the model built here."""
