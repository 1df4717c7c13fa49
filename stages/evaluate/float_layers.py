"""The share of the INT8 model's time that its float layers take in onnxruntime.

PaddleSlim quantizes convolutions and matmuls; a recurrent neck (a text recognizer's LSTM) and the layers
the search left in FP32 stay float. Their count (the runner's `int8_ops`, from the graph onnxruntime really
runs) does not say what they cost, so onnxruntime's own profiler times every kernel of the INT8 model over a
few calls, and the float layers' share of that time goes into the evaluation: what INT8 cannot speed up.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort

PROFILED_CALLS = 20


def kernel_time_by_op(onnx_file: Path, batch: np.ndarray, threads: int,
                      calls: int = PROFILED_CALLS) -> dict[str, int]:
    """Microseconds onnxruntime's profiler attributes to each operator type over `calls` runs on `batch`."""
    with tempfile.TemporaryDirectory(prefix="quantgate-profile-") as scratch:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.enable_profiling, options.profile_file_prefix = True, str(Path(scratch) / "int8")
        session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: batch}
        for _ in range(calls):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    spent: Counter = Counter()
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += int(event["dur"])
    return dict(spent)


def float_layers_record(int8_onnx: Path, int8_ops: dict, batch: np.ndarray, threads: int) -> dict | None:
    """The INT8 model's float layers (from onnxruntime's `int8_ops`) and their share of its kernel time on
    `batch`; None, without profiling, when every convolution and matmul runs an integer kernel and there is
    no recurrent layer."""
    counts = dict(sorted({**int8_ops["float_kernels"], **int8_ops["float_recurrent"]}.items()))
    if not counts:
        return None
    spent = kernel_time_by_op(int8_onnx, batch, threads)
    total = sum(spent.values()) or 1
    shares = {op: spent.get(op, 0) / total for op in counts}
    return {"layers": counts, "kernel_time_share": shares, "total_kernel_time_share": sum(shares.values()),
            "batch_size": int(len(batch)), "profiled_calls": PROFILED_CALLS,
            "note": "recurrent layers are not quantized by PaddleSlim and run in float" if
                    int8_ops["float_recurrent"] else "layers left in FP32 (the search's fall-backs)"}
