"""Data stage: the digits or an image folder, split deterministically into train / calibration / validation / test."""

from quantgate.stages.data.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "DataChanged": "reading", "DataError": "errors", "DataResult": "splits", "FolderPlan": "folder_plan",
    "HashState": "file_hashes", "StoredData": "reading", "open_data": "reading", "plan_image_folders": "folder_plan",
    "prepare_data": "splits",
})
