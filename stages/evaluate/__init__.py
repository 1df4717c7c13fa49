"""Evaluate stage: FP32 vs INT8 on the test split in each listed runtime (onnxruntime, OpenVINO, Paddle
Inference), latency timed in a process of its own per runtime."""

from quantgate.stages.evaluate.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "EvaluateResult": "accuracy", "evaluate": "accuracy", "NoInt8Kernels": "accuracy",
    "RuntimeUnavailable": "quantgate.runtimes.forms", "check_runtimes": "quantgate.runtimes.forms",
    "cpu_record": "quantgate.runtimes.cpu",
})
