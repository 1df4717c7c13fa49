"""Data stage: the digits or an image folder, split deterministically into train / calibration / validation / test."""

from quantgate.stages.data.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "DataError": "errors", "DataResult": "splits", "Splits": "splits", "load_splits": "splits",
    "prepare_data": "splits",
})
