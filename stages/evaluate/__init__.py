"""Evaluate stage: FP32 vs INT8 in onnxruntime on the test split, latency timed in a process of its own."""

from quantgate.stages.evaluate.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "EvaluateResult": "accuracy", "evaluate": "accuracy", "predict": "accuracy",
})
