"""Convert stage: paddle2onnx turns the FP32 and INT8 Paddle models into checked ONNX files, and the
INT8 one is lowered to the integer form onnxruntime runs fast (see lower_int8).

The lowered model's integer graph is described (`integer_graph.describe`: every integer tensor, its grid and
bits, every integer op) and, on a few of the data's own samples, checked op by op: each integer kernel
onnxruntime runs, fed its own input codes, against the QDQ arithmetic computed in numpy. The manifest keeps both
(`int8.integer_graph`, `int8.op_check`); an op more than 1 code off is named in a warning."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx
import paddle2onnx

from quantgate.int8.integer_graph import OpCheck, check_ops, describe
from quantgate.int8.lower_int8 import Lowering, lower_int8
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.onnx_ops import integer_op_counts, runtime_op_counts
from quantgate.int8.weight_range import WeightBits
from quantgate.samples.reading import open_data
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, OPSET, PADDLE2ONNX_INT8_FILE
from quantgate.stages.convert.pir import is_calibrated_on_onnx, is_pir_export, lower_onnx_calibration, pir_to_onnx

log = logging.getLogger(__name__)

OP_CHECK_SAMPLES = 2  # the data's first calibration samples the integer ops are checked on


@dataclass(frozen=True)
class ConvertResult:
    fp32_file: str
    int8_file: str
    paddle2onnx_int8_file: str
    metrics: dict


def convert(fp32_dir: Path, int8_dir: Path, model_file: str, params_file: str, out_dir: Path,
            weight_bits: WeightBits = WeightBits(8, "as PaddleSlim quantized them"),
            hardswish_grids: bool = False, data_dir: Path | None = None) -> ConvertResult:
    """Convert the exported FP32 model and the PaddleSlim INT8 model to ONNX (opset 13), then lower
    the INT8 one to integer kernels with PaddleSlim's scales, its weights in `weight_bits` bits
    (`weight_range.onnxruntime_weight_bits` says how many for the CPU the model is judged on), with
    `hardswish_grids` (convert.hardswish_grids: `affine_absorption`). `data_dir`: the data stage's folder, whose
    first calibration samples the integer ops are checked on (None: described only).

    Raises:
        ConversionError: a conversion or the lowering failed, or a model fails onnx.checker.
    """
    out_dir = Path(out_dir)
    if is_pir_export(fp32_dir):  # Paddle 3's PIR format: the export stage's paddle2onnx 2.x model (convert.pir)
        fp32 = pir_to_onnx(fp32_dir, out_dir / FP32_FILE)
    else:
        fp32 = to_onnx(Path(fp32_dir) / model_file, Path(fp32_dir) / params_file, out_dir / FP32_FILE)
    if is_calibrated_on_onnx(int8_dir):  # no PaddleSlim program: the raw graph quantgate calibrated, kept as is
        lowering = Lowering(weight_bits.bits, hardswish_grids)
        lowered = lower_onnx_calibration(int8_dir, out_dir / PADDLE2ONNX_INT8_FILE, out_dir / INT8_FILE,
                                         lowering).metrics
        raw = {"bytes": (out_dir / PADDLE2ONNX_INT8_FILE).stat().st_size, "calibrated_by": lowered["calibrated_by"]}
    else:
        raw = to_onnx(Path(int8_dir) / model_file, Path(int8_dir) / params_file, out_dir / PADDLE2ONNX_INT8_FILE)
        lowered = lower_int8(out_dir / PADDLE2ONNX_INT8_FILE, out_dir / INT8_FILE,
                             paddle_model_prefix=Path(int8_dir) / Path(model_file).stem,
                             weight_bits=weight_bits.bits, hardswish_grids=hardswish_grids).metrics
    lowered.update(weight_bits.record())
    lowered["hardswish_grids"] = hardswish_grids
    int8_model = onnx.load(str(out_dir / INT8_FILE))
    graph = describe(int8_model)
    lowered["integer_graph"] = graph.summary()
    check_inputs = None if data_dir is None else open_data(data_dir).array("calibration", limit=OP_CHECK_SAMPLES)[0]
    if check_inputs is not None and len(check_inputs):
        lowered["op_check"] = op_check_record(check_ops(int8_model, {int8_model.graph.input[0].name: check_inputs},
                                                        graph), len(check_inputs))
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


def op_check_record(checks: list[OpCheck], samples: int) -> dict:
    """`check_ops` for the manifest: the largest code difference per op type, the kernels that ran, and the ops more
    than 1 code off (a warning names them: a kernel computing other than the model says)."""
    by_type: dict[str, dict] = {}
    for check in checks:
        entry = by_type.setdefault(check.op_type, {"ops": 0, "max_code_difference": 0, "kernels": Counter()})
        entry["ops"] += 1
        entry["max_code_difference"] = max(entry["max_code_difference"], check.max_code_difference)
        entry["kernels"][check.kernel] += 1
    off = [check.op for check in checks if check.max_code_difference > 1]
    if off:
        log.warning("convert: %d of %d integer ops differ from their QDQ arithmetic by more than 1 code in "
                    "onnxruntime (%s); the INT8 model's accuracy on the test split is what the gate judges",
                    len(off), len(checks), ", ".join(off[:5]))
    return {"samples": samples, "ops": len(checks),
            "max_code_difference": max((check.max_code_difference for check in checks), default=0),
            "ops_off_by_more_than_one_code": off,
            "by_type": {name: {**entry, "kernels": dict(entry["kernels"])} for name, entry in sorted(by_type.items())}}
