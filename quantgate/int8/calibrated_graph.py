"""An INT8 model calibrated on its ONNX graph, as files: the raw Q/DQ graph (paddle2onnx 1.3.1's pattern) and the
scales its Paddle program would hold, which `lower_int8_model` reads in place of a PaddleSlim program.

The quantize stage writes both for a PIR model (PaddleSlim reads no PIR program) and the convert stage lowers them;
the scales are float32 written as JSON numbers (a float32 survives the round trip through a double exactly).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx

from quantgate.int8.errors import ConversionError
from quantgate.int8.lower_int8 import Lowering, LoweringResult, lower_int8_model
from quantgate.int8.paddle_quantization import WeightScales

# Who made such a model: the records and the model card say it in these words.
CALIBRATED_BY = "quantgate on the ONNX graph (PaddleSlim reads no PIR program)"


def save_program_scales(scales: WeightScales, path: Path) -> None:
    """`scales` as canonical JSON ({name: {"scales": [...], "axis": int | null}}), written atomically."""
    record = {name: {"scales": [float(value) for value in np.asarray(values, np.float32).ravel()], "axis": axis}
              for name, (values, axis) in scales.items()}
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record, sort_keys=True, indent=1), encoding="utf-8")
    os.replace(temporary, path)


def load_program_scales(path: Path) -> WeightScales:
    """What `save_program_scales` wrote.

    Raises:
        ConversionError: the file is missing or is not such a record.
    """
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        return {name: (np.array(entry["scales"], np.float32), entry["axis"]) for name, entry in record.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConversionError(f"{path} holds no program scales of a calibration on the ONNX graph ({exc}); run the "
                              "quantize stage again") from exc


def lower_calibrated_files(raw_onnx: Path, scales_file: Path, out_onnx: Path,
                           lowering: Lowering | None = None) -> LoweringResult:
    """`lower_int8_model` on a raw graph calibrated on the ONNX graph and its saved scales; the record says who
    calibrated.

    Raises:
        ConversionError: as `lower_int8_model`, or the scales file is unreadable.
    """
    result = lower_int8_model(onnx.load(str(raw_onnx)), out_onnx, load_program_scales(scales_file),
                              name=Path(raw_onnx).name, **(lowering or Lowering()).options())
    result.metrics["calibrated_by"] = CALIBRATED_BY
    return result
