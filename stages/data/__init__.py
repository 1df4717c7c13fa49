"""Data stage: the digits or an image folder, split deterministically into train / calibration / validation / test."""

from quantgate.stages.data.errors import DataError
from quantgate.stages.data.outputs import OUTPUTS
from quantgate.stages.data.splits import DataResult, Splits, load_splits, prepare_data

__all__ = ["OUTPUTS", "DataError", "DataResult", "Splits", "load_splits", "prepare_data"]
