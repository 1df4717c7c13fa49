"""Convert stage: paddle2onnx turns the FP32 and INT8 Paddle models into checked ONNX files, and the
INT8 one is lowered to the integer form onnxruntime runs fast (see lower_int8)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import paddle2onnx

from quantgate.int8.lower_int8 import lower_int8
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.onnx_ops import integer_op_counts, runtime_op_counts
from quantgate.int8.weight_range import WeightBits
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, OPSET, PADDLE2ONNX_INT8_FILE


@dataclass(frozen=True)
class ConvertResult:
    fp32_file: str
    int8_file: str
    paddle2onnx_int8_file: str
    metrics: dict


def convert(fp32_dir: Path, int8_dir: Path, model_file: str, params_file: str, out_dir: Path,
            weight_bits: WeightBits = WeightBits(8, "as PaddleSlim quantized them"),
            hardswish_grids: bool = False) -> ConvertResult:
    """Convert the exported FP32 model and the PaddleSlim INT8 model to ONNX (opset 13), then lower
    the INT8 one to integer kernels with PaddleSlim's scales, its weights in `weight_bits` bits
    (`weight_range.onnxruntime_weight_bits` says how many for the CPU the model is judged on), with
    `hardswish_grids` (convert.hardswish_grids: `affine_absorption`).

    Raises:
        ConversionError: a conversion or the lowering failed, or a model fails onnx.checker.
    """
    out_dir = Path(out_dir)
    fp32 = to_onnx(Path(fp32_dir) / model_file, Path(fp32_dir) / params_file, out_dir / FP32_FILE)
    raw = to_onnx(Path(int8_dir) / model_file, Path(int8_dir) / params_file, out_dir / PADDLE2ONNX_INT8_FILE)
    lowered = lower_int8(out_dir / PADDLE2ONNX_INT8_FILE, out_dir / INT8_FILE,
                         paddle_model_prefix=Path(int8_dir) / Path(model_file).stem,
                         weight_bits=weight_bits.bits, hardswish_grids=hardswish_grids).metrics
    lowered.update(weight_bits.record())
    lowered["hardswish_grids"] = hardswish_grids
    runtime = {name: runtime_op_counts(out_dir / file)
               for name, file in (("fp32", FP32_FILE), ("int8_paddle2onnx", PADDLE2ONNX_INT8_FILE), ("int8", INT8_FILE))}
    metrics = {
        "opset": OPSET,
        "paddle2onnx": paddle2onnx.__version__,
        "fp32": {**fp32, "after_onnxruntime_optimization": runtime["fp32"]},
        "int8_paddle2onnx": {
            **raw, **integer_op_counts(onnx.load(str(out_dir / PADDLE2ONNX_INT8_FILE))),
            "after_onnxruntime_optimization": runtime["int8_paddle2onnx"],
        },
        "int8": {**lowered, "after_onnxruntime_optimization": runtime["int8"]},
        "int8_size_ratio_vs_fp32": lowered["bytes"] / fp32["bytes"],
        "onnx_checker_passed": True,
    }
    return ConvertResult(FP32_FILE, INT8_FILE, PADDLE2ONNX_INT8_FILE, metrics)
