"""A PIR export in the convert stage: its FP32 ONNX model is the export stage's (paddle2onnx 2.x, checked against
Paddle there: quantgate.pir.conversion), kept as it is; its INT8 model is no PaddleSlim program but the raw Q/DQ
graph the quantize stage calibrated on that ONNX graph, with the scales its program would hold, lowered here as
PaddleSlim's are (`lower_int8_model`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from quantgate.int8.calibrated_graph import lower_calibrated_files
from quantgate.int8.errors import ConversionError
from quantgate.int8.lower_int8 import Lowering, LoweringResult
from quantgate.pir.converter import find_converter
from quantgate.stages.export.outputs import FP32_ONNX_FILE, PIR_MODEL_FILE
from quantgate.stages.quantize.outputs import CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE


def is_pir_export(fp32_dir: Path) -> bool:
    return (Path(fp32_dir) / PIR_MODEL_FILE).is_file()


def is_calibrated_on_onnx(int8_dir: Path) -> bool:
    """The quantize stage calibrated on the ONNX graph (a PIR model) rather than writing a PaddleSlim program."""
    return (Path(int8_dir) / CALIBRATED_ONNX_FILE).is_file()


def pir_to_onnx(fp32_dir: Path, onnx_file: Path) -> dict:
    """The export stage's FP32 ONNX model of its PIR program, copied; its record (the export's manifest holds the
    conversion's own: converter, patches, check against Paddle).

    Raises:
        ConversionError: the export stage holds no FP32 ONNX model (an export from before it made one).
    """
    made = Path(fp32_dir) / FP32_ONNX_FILE
    if not made.is_file():
        raise ConversionError(f"the PIR export {fp32_dir} holds no {FP32_ONNX_FILE}: it predates the export stage "
                              "converting PIR models; run again with --no-reuse")
    shutil.copyfile(made, onnx_file)
    graph = onnx.load(str(onnx_file)).graph
    return {"converter": find_converter().record(), "made_by": f"the export stage ({FP32_ONNX_FILE}, checked against "
            "Paddle Inference's outputs there)", "bytes": Path(onnx_file).stat().st_size, "nodes": len(graph.node)}


def lower_onnx_calibration(int8_dir: Path, raw_copy: Path, out_onnx: Path, lowering: Lowering) -> LoweringResult:
    """The quantize stage's raw INT8 graph (calibrated on the ONNX graph), kept as `raw_copy`, lowered to `out_onnx`
    with the scales it saved.

    Raises:
        ConversionError: the lowering failed, or the scales file is unreadable.
    """
    shutil.copyfile(Path(int8_dir) / CALIBRATED_ONNX_FILE, raw_copy)
    return lower_calibrated_files(raw_copy, Path(int8_dir) / PROGRAM_SCALES_FILE, out_onnx, lowering)
