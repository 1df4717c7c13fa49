"""The quantize stage's `strategy: single` entry: PaddleSlim on a legacy program (`ptq.quantize`), or, for a PIR
export, quantgate's calibration on its FP32 ONNX graph (`onnx_candidates`), since PaddleSlim reads no PIR program."""

from __future__ import annotations

from pathlib import Path

from quantgate.config import QuantizeConfig
from quantgate.memory import BATCHES_KEY
from quantgate.samples.reading import open_data
from quantgate.stages.quantize.memory_fit import CALIBRATION_LOOP, calibration_choice, choice_record, fitted
from quantgate.stages.quantize.onnx_candidates import calibrate_single
from quantgate.stages.quantize.outputs import CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE
from quantgate.stages.quantize.pir_seam import is_pir_export, require_onnx_graph
from quantgate.stages.quantize.ptq import QuantizationError, QuantizeResult
from quantgate.stages.quantize.ptq import quantize as quantize_program


def quantize(
    config: QuantizeConfig, model_dir: Path, model_file: str, params_file: str, data_dir: Path, out_dir: Path,
    num_workers: int = 0, weight_bits: int = 8, hardswish_grids: bool = False,
) -> QuantizeResult:
    """`config`'s recipe on the exported FP32 model, calibrated on the data stage's calibration split: as
    `ptq.quantize` for a legacy program; for a PIR export, calibrated on its FP32 ONNX graph and written as the raw
    Q/DQ graph and its program scales (the convert stage lowers them; `weight_bits` and `hardswish_grids` are the
    lowering's there).

    Raises:
        QuantizationError: the calibration split is too small, or (PIR) a recipe calibration on the ONNX graph does
            not do (bias_correction, AdaRound).
        PirNotQuantizable: a PIR export without its FP32 ONNX model.
        MemoryRefused: one calibration sample does not fit the memory budget (a legacy program).
        DataError: `data_dir` is not a data stage's output, or an image changed since the data stage.
    """
    if not is_pir_export(model_dir):
        return quantize_program(config, model_dir, model_file, params_file, data_dir, out_dir,
                                num_workers=num_workers, weight_bits=weight_bits, hardswish_grids=hardswish_grids)
    graph = require_onnx_graph(model_dir)
    data = open_data(data_dir)
    choice = calibration_choice(config, model_dir, data)
    try:
        metrics = calibrate_single(fitted(config, choice), graph, data, Path(out_dir))
    except ValueError as exc:
        raise QuantizationError(str(exc)) from exc
    metrics[BATCHES_KEY] = {CALIBRATION_LOOP: choice_record(config, choice)}
    return QuantizeResult(model_file=CALIBRATED_ONNX_FILE, params_file=PROGRAM_SCALES_FILE, metrics=metrics)
