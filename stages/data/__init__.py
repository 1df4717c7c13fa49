"""Data stage: the digits, an image folder, text lines (PaddleOCR layout) or the built-in digit strings, split
deterministically into train / calibration / validation / test."""

from quantgate.stages.data.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "BadTextBoxes": "errors", "BadTextLines": "errors", "BoxPlan": "text_boxes", "DataChanged": "reading", "DataError": "errors", "DataResult": "splits",
    "FolderPlan": "folder_plan", "HashState": "file_hashes", "StoredData": "reading", "TextPlan": "text_lines",
    "open_data": "reading", "plan_image_folders": "folder_plan", "plan_text_lines": "text_lines",
    "plan_text_boxes": "text_boxes",
    "prepare_data": "splits",
})
