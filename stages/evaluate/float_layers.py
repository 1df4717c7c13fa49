"""Layers of the INT8 model that still compute in float, and their share of its time in onnxruntime.

PaddleSlim quantizes convolutions and matmuls; a recurrent neck (a text recognizer's LSTM) and the layers
the search left in FP32 stay float. Their count alone does not say what they cost, so onnxruntime's own
profiler times every kernel of the INT8 model over a few calls, and the float layers' share of that time
goes into the evaluation: what INT8 cannot speed up in this model.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
FLOAT_LAYER_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", *RECURRENT_OPS)  # integer kernels have other names
PROFILED_CALLS = 20


def _float_layer_counts(model: onnx.ModelProto) -> dict[str, int]:
    """How many nodes of each float layer type a graph holds."""
    return dict(sorted(Counter(node.op_type for node in model.graph.node if node.op_type in FLOAT_LAYER_OPS).items()))


def profile(onnx_file: Path, batch: np.ndarray, threads: int,
            calls: int = PROFILED_CALLS) -> tuple[dict[str, int], dict[str, int]]:
    """The float layers of the graph onnxruntime really runs (after it fused QuantizeLinear/DequantizeLinear
    pairs into integer kernels) and the microseconds its profiler attributes to each operator type over
    `calls` runs on `batch`."""
    with tempfile.TemporaryDirectory(prefix="quantgate-profile-") as scratch:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.optimized_model_filepath = str(Path(scratch) / "optimized.onnx")
        options.enable_profiling, options.profile_file_prefix = True, str(Path(scratch) / "int8")
        session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: batch}
        for _ in range(calls):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
        counts = _float_layer_counts(onnx.load(options.optimized_model_filepath, load_external_data=False))
    spent: Counter = Counter()
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += int(event["dur"])
    return counts, dict(spent)


def float_layers_record(int8_onnx: Path, batch: np.ndarray, threads: int) -> dict | None:
    """The INT8 model's float layers as onnxruntime runs it and their share of its kernel time on `batch`;
    None when every convolution, matmul and recurrent layer runs an integer kernel."""
    counts, spent = profile(int8_onnx, batch, threads)
    if not counts:
        return None
    total = sum(spent.values()) or 1
    shares = {op: spent.get(op, 0) / total for op in counts}
    return {"layers": counts, "kernel_time_share": shares, "total_kernel_time_share": sum(shares.values()),
            "batch_size": int(len(batch)), "profiled_calls": PROFILED_CALLS,
            "note": "recurrent layers are not quantized by PaddleSlim and run in float" if
                    set(counts) & set(RECURRENT_OPS) else "layers left in FP32 (the search's fall-backs)"}
