"""Data stage: the digits, an image folder, text lines (PaddleOCR layout) or the built-in digit strings, split
deterministically into train / calibration / validation / test."""

from quantgate.stages.data.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "BadTextBoxes": "quantgate.samples.errors", "BadTextLines": "quantgate.samples.errors", "BoxPlan": "text_boxes", "DataChanged": "quantgate.samples.reading",
    "DataError": "quantgate.samples.errors", "DataResult": "splits",
    "FolderPlan": "folder_plan", "HashState": "quantgate.samples.file_hashes",
    "StoredData": "quantgate.samples.reading", "TextPlan": "text_lines",
    "open_data": "quantgate.samples.reading", "plan_image_folders": "folder_plan", "plan_text_lines": "text_lines",
    "plan_text_boxes": "text_boxes",
    "prepare_data": "splits", "data_roots": "locations", "without_locations": "locations",
})
