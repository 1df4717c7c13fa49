"""Export stage: the float32 master weights saved as a Paddle inference model and checked against training."""

from quantgate.stages.export.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "ExportMismatch": "inference_model", "ExportResult": "inference_model", "export": "inference_model",
    "export_program": "program",
})
