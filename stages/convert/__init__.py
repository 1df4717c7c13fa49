"""Convert stage: paddle2onnx for both models, the INT8 one lowered to onnxruntime's integer kernels."""

from quantgate.stages.convert.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "this_cpus_weight_bits": "quantgate.int8.weight_range", "converter_environment": "quantgate.pir.converter",
    "ConversionError": "quantgate.int8.errors", "ConvertResult": "onnx_export", "convert": "onnx_export", "to_onnx": "quantgate.int8.onnx_conversion",
})
