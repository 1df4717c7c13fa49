"""OpenVINO (CPU plugin): ONNX models compiled with a static input shape and f32 as the inference precision.

- Precision: on CPUs with AVX512-BF16 or AMX the CPU plugin's default inference precision is bf16, so an
  "FP32" model silently runs in bf16 (measured here: the default compiled the digits CNN's FP32 layers as
  bf16). INFERENCE_PRECISION_HINT=f32 pins FP32 models, and the float parts of INT8 models, to f32.
- Static shapes: OpenVINO 2026.1-2026.3 crash on INT8 models with dynamic dimensions on AMX CPUs
  (openvino issue 37577); every model is reshaped to the batch it runs, and the accuracy pass pads the
  last partial batch and drops the padded rows' outputs.
- Form: OpenVINO reads QDQ ONNX into its low-precision transformations; QOperator does not load: on
  ResNet18, onnxruntime's fused QOperator graph fails in 2026.4.1's ONNX frontend (QLinearConv with
  per-channel weight scales, com.microsoft QLinearAdd/QLinearGlobalAveragePool). Of the two QDQ files with
  PaddleSlim's scales, quantgate's int8.onnx (int8 weights, linear layers quantized too) ran faster than
  paddle2onnx's int8_paddle2onnx.onnx (float weights; its linear layers stay f32), 2 threads, median ms:
  digits CNN b16 0.49 vs 0.55; ResNet18 b1 8.1 vs 8.5, b16 170 vs 192; MobileNetV2 b1 3.1 vs 4.2, b16 89 vs 114.
"""

from __future__ import annotations

from collections import Counter
from importlib.metadata import version

import numpy as np
import openvino as ov

from quantgate.errors import StageError
from quantgate.runtimes.forms import ModelForm

PRECISION = "f32"
CONV_MATMUL_LAYERS = ("Convolution", "GroupConvolution", "Deconvolution", "GroupDeconvolution", "FullyConnected",
                      "MatMul")
INT8_PRECISIONS = ("u8", "i8")


def library() -> str:
    return f"openvino {version('openvino')}"


class Runner:
    """One ONNX model compiled for the CPU with a static batch: images -> logits (any count of images)."""

    def __init__(self, form: ModelForm, threads: int, batch_shape: tuple[int, ...]):
        self.form = form
        core = ov.Core()
        model = core.read_model(str(form.path))
        if len(model.inputs) != 1:
            raise StageError(f"{form.path.name} has {len(model.inputs)} inputs; the evaluate stage feeds one image batch")
        model.reshape({model.inputs[0].get_any_name(): ov.PartialShape(list(batch_shape))})
        self.batch = int(batch_shape[0])
        self.compiled = core.compile_model(model, "CPU", {
            "INFERENCE_PRECISION_HINT": PRECISION, "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
        })
        self.request = self.compiled.create_infer_request()

    def __call__(self, images: np.ndarray) -> np.ndarray:
        logits = []
        for start in range(0, len(images), self.batch):
            chunk = images[start : start + self.batch]
            count = len(chunk)
            if count < self.batch:  # the compiled shape is static: pad, then drop the padded rows' outputs
                chunk = np.concatenate([chunk, np.zeros((self.batch - count, *chunk.shape[1:]), chunk.dtype)])
            output = self.request.infer({0: np.ascontiguousarray(chunk)})[0]
            logits.append(np.array(output[:count]))  # a copy: the request reuses its output buffer
        return np.concatenate(logits)

    def inference_precision(self) -> str:
        """The compiled model's INFERENCE_PRECISION_HINT, as OpenVINO reports it (f32 once pinned)."""
        return self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()

    def int8_ops(self) -> dict:
        """Convolutions and matmuls of the compiled (runtime) model, and how many run in u8/i8 (rt_info)."""
        layers, kernels = Counter(), Counter()
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            layer = info["layerType"].astype(str)
            if layer not in CONV_MATMUL_LAYERS:
                continue
            precision = info["runtimePrecision"].astype(str)
            layers[(layer, precision)] += 1
            kernels[info["primitiveType"].astype(str)] += 1
        int8 = sum(count for (_, precision), count in layers.items() if precision in INT8_PRECISIONS)
        return {"int8": int8, "total_conv_matmul": sum(layers.values()),
                "runtime_precision": {f"{layer} {precision}": count for (layer, precision), count in sorted(layers.items())},
                "kernels": dict(sorted(kernels.items()))}
