"""Errors the stages raise; each message names the bad value and the fix."""

from quantgate.errors import QuantgateError


class StageError(QuantgateError):
    """A stage could not produce a trustworthy result."""


class DataError(StageError):
    """The dataset or its split is unusable."""

    exit_code = 2


class ModelError(StageError):
    """The configured architecture cannot be built (unknown name, bad entry point, failing factory)."""

    exit_code = 2


class DistributedTrainingFailed(StageError):
    """A rank of the multi-process training failed, or the ranks ended with different weights."""


class TrainingDiverged(StageError):
    """The loss stayed non-finite, or the trained weights are not finite."""

    exit_code = 2


class TooManySkippedSteps(TrainingDiverged):
    """More steps than `train.amp.max_skipped_ratio` allows were skipped for inf/NaN gradients."""


class ResumeMismatch(StageError):
    """A checkpoint cannot continue this run: other settings, other data, or nothing left to train."""

    exit_code = 2


class ExportMismatch(StageError):
    """The exported inference model is not the trained float32 model."""


class QuantizationError(StageError):
    """PaddleSlim could not quantize the model with the given settings."""

    exit_code = 2


class ConversionError(StageError):
    """paddle2onnx produced no model, or one that fails onnx.checker."""


class GateFailed(QuantgateError):
    """The INT8 model did not meet the release policy; `criteria` holds every failed rule."""

    exit_code = 1

    def __init__(self, model: str, version: str, criteria: list[str]):
        self.model = model
        self.version = version
        self.criteria = list(criteria)
        super().__init__(
            f"release gate failed for {model}/{version}: " + "; ".join(self.criteria)
            + ". The version is kept for inspection and 'release' was not moved."
        )
