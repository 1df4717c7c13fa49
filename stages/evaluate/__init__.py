"""Evaluate stage: FP32 vs INT8 in onnxruntime on the test split, latency timed in a process of its own."""

from quantgate.stages.evaluate.accuracy import EvaluateResult, evaluate, predict
from quantgate.stages.evaluate.outputs import OUTPUTS

__all__ = ["OUTPUTS", "EvaluateResult", "evaluate", "predict"]
