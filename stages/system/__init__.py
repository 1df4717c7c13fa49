"""The OCR system: PaddleOCR's detector finds text lines on a page, each is cropped straight, turned by the direction
classifier where needed and read by the recognizer; the all-INT8 system is judged against the all-FP32 one end to end.

The engine, its crops and the matching of read lines live in `quantgate.ocr` (the bundle deploys the same system);
the page picture in `quantgate.pictures`. This package evaluates, gates and reports.
"""

from quantgate.stages.shared.lazy import lazy_exports
from quantgate.stages.system.outputs import OUTPUTS as OUTPUTS

__getattr__, __all__ = lazy_exports(__name__, {
    "Component": "quantgate.ocr.components", "evaluate_system": "evaluate", "gate_system": "gate",
    "judge_system": "gate", "paired_release": "gate", "report_system": "report",
})
