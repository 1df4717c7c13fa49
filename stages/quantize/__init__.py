"""Quantize stage: PaddleSlim post-training INT8, one recipe or the accuracy-aware search."""

from quantgate.stages.quantize.outputs import OUTPUTS
from quantgate.stages.quantize.ptq import QuantizationError, QuantizeResult, calibration_batches, quantize
from quantgate.stages.quantize.search import search_quantization

__all__ = ["OUTPUTS", "QuantizationError", "QuantizeResult", "calibration_batches", "quantize", "search_quantization"]
