"""onnxruntime (CPU provider): sessions, and the INT8 kernels the graph onnxruntime runs really has.

The convert stage's int8.onnx is QDQ with int8 weights and uint8 activations; onnxruntime's fusions turn
it into QLinearConv and MatMulIntegerToFloat ("lowered"), whose counts `int8_ops` reads from the graph
onnxruntime saves after its optimizations.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from quantgate.runtimes.forms import ModelForm

INT8_CONV_MATMUL = ("QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QGemm",
                    "DynamicQuantizeMatMul")
FLOAT_CONV_MATMUL = ("Conv", "FusedConv", "NhwcFusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "Gemm",
                     "FusedGemm", "TransposeMatMul")
# PaddleSlim does not quantize recurrent layers (a text recognizer's LSTM neck): they always run in float.
FLOAT_RECURRENT = ("LSTM", "GRU", "RNN")


def library() -> str:
    return f"onnxruntime {ort.__version__}"


def session(onnx_file: Path, threads: int, optimized_copy: Path | None = None) -> ort.InferenceSession:
    """A CPU session with a fixed thread count, so latencies of the two models compare.

    `optimized_copy`: also save the graph as onnxruntime runs it (after its fusions) to that file.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if optimized_copy is not None:
        options.optimized_model_filepath = str(optimized_copy)
        options.log_severity_level = 3  # it warns that the saved graph is hardware specific; that is the point
    return ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])


class Runner:
    """One ONNX model in onnxruntime: images -> logits."""

    def __init__(self, form: ModelForm, threads: int, batch_shape: tuple[int, ...] = ()):
        self.form = form
        self.session = session(form.path, threads)
        self.input = self.session.get_inputs()[0].name

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: images})[0]

    def int8_ops(self) -> dict:
        """Convolutions and matmuls of the graph onnxruntime runs, how many of them are integer kernels, and the
        recurrent layers it runs (in float)."""
        with tempfile.TemporaryDirectory(prefix="quantgate-ort-") as scratch:
            lowered = Path(scratch) / "lowered.onnx"
            session(self.form.path, 1, optimized_copy=lowered)
            ops = Counter(node.op_type for node in onnx.load(str(lowered)).graph.node)
        int8 = {op: ops[op] for op in INT8_CONV_MATMUL if ops[op]}
        floats = {op: ops[op] for op in FLOAT_CONV_MATMUL if ops[op]}
        return {"int8": sum(int8.values()), "total_conv_matmul": sum(int8.values()) + sum(floats.values()),
                "int8_kernels": int8, "float_kernels": floats,
                "float_recurrent": {op: ops[op] for op in FLOAT_RECURRENT if ops[op]}}
