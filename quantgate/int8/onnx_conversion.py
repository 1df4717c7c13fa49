"""paddle2onnx: one Paddle inference model (FP32 or PaddleSlim's INT8) as a checked ONNX file."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import onnx
import paddle2onnx

from quantgate.int8.errors import ConversionError
from quantgate.stages.convert.outputs import OPSET


def to_onnx(model_file: Path, params_file: Path, onnx_file: Path) -> dict:
    """Convert one Paddle inference model and return facts about the ONNX graph.

    Raises:
        ConversionError: paddle2onnx failed or the result does not pass onnx.checker.
    """
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            paddle2onnx.export(
                str(model_file), str(params_file), save_file=str(onnx_file), opset_version=OPSET,
                enable_onnx_checker=True,
            )
        onnx.checker.check_model(str(onnx_file), full_check=True)
    except Exception as exc:  # paddle2onnx raises bare RuntimeErrors from C++
        raise ConversionError(f"paddle2onnx could not convert {model_file.name}: {exc}\n{log.getvalue()}") from exc
    graph = onnx.load(str(onnx_file)).graph
    ops: dict[str, int] = {}
    for node in graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {"bytes": onnx_file.stat().st_size, "nodes": len(graph.node), "ops": dict(sorted(ops.items()))}
