"""The FP32 ONNX model of a PIR export: paddle2onnx 2.x in a child process, checked against Paddle's own outputs on
the data's first calibration samples (quantgate.pir.conversion). The INT8 model is not a PaddleSlim program for a
PIR model: it is calibrated on this ONNX graph (the quantize stage)."""

from __future__ import annotations

from pathlib import Path

from quantgate.pir.conversion import convert_fp32
from quantgate.pir.folder import PirFolder
from quantgate.samples.reading import open_data
from quantgate.stages.convert.outputs import OPSET
from quantgate.stages.export.outputs import MODEL_PREFIX, PIR_MODEL_FILE

CHECK_SAMPLES = 4  # the data's first calibration samples the ONNX model must agree with Paddle on


def is_pir_export(fp32_dir: Path) -> bool:
    return (Path(fp32_dir) / PIR_MODEL_FILE).is_file()


def pir_to_onnx(fp32_dir: Path, onnx_file: Path, data_dir: Path | None) -> dict:
    """paddle2onnx 2.x's FP32 ONNX model of the exported PIR program, checked; its record.

    Raises:
        ConverterMissing: paddle2onnx 2.x is not installed (the install line is named).
        ConversionRefused: the converter aborted, wrote nothing or an invalid model, or its outputs are not Paddle's.
        PirProblem: no data to check the conversion on, or Paddle cannot run the program.
    """
    from quantgate.pir.errors import PirProblem

    if data_dir is None:
        raise PirProblem("a PIR model's ONNX conversion is checked against Paddle on the data's calibration samples: "
                         "pass the data stage's folder (convert(..., data_dir=...))")
    samples = open_data(data_dir).array("calibration", limit=CHECK_SAMPLES)[0]
    return convert_fp32(PirFolder(Path(fp32_dir), MODEL_PREFIX), Path(onnx_file), samples, OPSET)
