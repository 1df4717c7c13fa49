"""Quantize stage: PaddleSlim post-training INT8, one recipe or the accuracy-aware search."""

from quantgate.stages.quantize.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "this_cpus_weight_bits": "quantgate.int8.weight_range",
    "QuantizationError": "ptq", "QuantizeResult": "ptq", "calibration_batches": "ptq", "quantize": "single",
    "quantize_with_data": "ptq",
    "search_quantization": "search",
    "calibration_environment": "memory_fit",
})
