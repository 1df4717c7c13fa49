"""Convert stage: paddle2onnx for both models, the INT8 one lowered to onnxruntime's integer kernels."""

from quantgate.stages.convert.errors import ConversionError
from quantgate.stages.convert.onnx_export import ConvertResult, convert, to_onnx
from quantgate.stages.convert.outputs import OUTPUTS

__all__ = ["OUTPUTS", "ConversionError", "ConvertResult", "convert", "to_onnx"]
