"""Export stage: the float32 master weights saved as a Paddle inference model and checked against training."""

from quantgate.stages.export.inference_model import ExportMismatch, ExportResult, export
from quantgate.stages.export.outputs import OUTPUTS

__all__ = ["OUTPUTS", "ExportMismatch", "ExportResult", "export"]
