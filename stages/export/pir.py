"""Export for a PIR model trained elsewhere (Paddle 3's default format): the program is the FP32 model as it is.

As `program.export_program` does for a legacy program, the files are copied byte for byte and one test batch's
outputs kept as the FP32 reference; Paddle runs them in a child process (quantgate.pir.children), oneDNN off where
an op needs it, which the record says. The FP32 ONNX model is made here too (paddle2onnx 2.x, checked against
Paddle's outputs on the data's first calibration samples: quantgate.pir.conversion), since it is part of the FP32
model of a PIR export: the quantize stage calibrates its INT8 on that graph (PaddleSlim reads no PIR program) and
the convert stage keeps it as the FP32 ONNX model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from quantgate.pir.conversion import convert_fp32
from quantgate.pir.folder import PirFolder, program_facts, require_pir_program
from quantgate.samples.reading import open_data
from quantgate.stages.convert.outputs import OPSET
from quantgate.stages.export.inference_model import ExportMismatch, ExportResult, low_precision_parameters
from quantgate.stages.export.outputs import (
    FP32_ONNX,
    FP32_ONNX_FILE,
    MODEL_PREFIX,
    PARAMS_FILE,
    PIR_MODEL_FILE,
    PROGRAM_FORMAT,
    REFERENCE_OUTPUTS_FILE,
)
from quantgate.stages.source.outputs import PARAMS_FILE as SOURCE_PARAMS_FILE
from quantgate.stages.source.outputs import PIR_PROGRAM_FILE as SOURCE_PIR_FILE

REFERENCE_BATCH = 32
CHECK_SAMPLES = 4  # the data's first calibration samples the FP32 ONNX model must agree with Paddle on
SETTINGS_SUFFIX = ".yml"


def is_pir_source(source_dir: Path) -> bool:
    """The source stage kept a PIR program (inference.json) rather than a legacy one."""
    return (Path(source_dir) / SOURCE_PIR_FILE).is_file()


def export_pir(source_dir: Path, data_dir: Path, out_dir: Path, num_workers: int = 0) -> ExportResult:
    """Keep the source stage's PIR program as the FP32 model and one test batch's Paddle outputs as its reference;
    convert it to FP32 ONNX (paddle2onnx 2.x), checked against Paddle on the data's first calibration samples.

    Raises:
        ExportMismatch: a parameter is not float32, or Paddle's outputs on the test batch are not finite or do not
            have one row per image.
        PirProblem: Paddle Inference cannot run the program on the batch.
        DataChanged: an image of the batch changed since the data stage recorded it.
        ConverterMissing: paddle2onnx 2.x is not installed (the install line is named).
        ConversionRefused: the converter aborted, wrote nothing or an invalid model, or its outputs are not Paddle's.
    """
    from quantgate.pir.children import paddle_outputs

    source_dir, out_dir = Path(source_dir), Path(out_dir)
    shutil.copyfile(source_dir / SOURCE_PIR_FILE, out_dir / PIR_MODEL_FILE)
    shutil.copyfile(source_dir / SOURCE_PARAMS_FILE, out_dir / PARAMS_FILE)
    facts = program_facts(require_pir_program(out_dir / PIR_MODEL_FILE))
    not_float32 = low_precision_parameters(facts.parameter_dtypes)
    if not_float32:
        shown = dict(list(not_float32.items())[:5])
        raise ExportMismatch(f"the imported model stores {len(not_float32)} parameters in low precision ({shown}); "
                             "export its float32 weights (the master copy, not an FP16/BF16 inference model)")
    data = open_data(data_dir)
    (images, _), = list(data.batches("test", REFERENCE_BATCH, num_workers, limit=REFERENCE_BATCH))
    outputs, paddle_run = paddle_outputs(out_dir / PIR_MODEL_FILE, out_dir / PARAMS_FILE, images)
    if len(outputs) != len(images) or not np.isfinite(outputs).all():
        raise ExportMismatch(f"the imported model gives {'non-finite' if len(outputs) == len(images) else 'misshaped'} "
                             f"outputs {list(outputs.shape)} on {len(images)} test images; check data.transforms "
                             "(size, color order, mean/std) against the model's inference.yml or training config")
    np.save(out_dir / REFERENCE_OUTPUTS_FILE, outputs)
    check_inputs = data.array("calibration", limit=CHECK_SAMPLES)[0]
    converted = convert_fp32(PirFolder(out_dir, MODEL_PREFIX), out_dir / FP32_ONNX_FILE, check_inputs, OPSET)
    return ExportResult(
        model_file=PIR_MODEL_FILE,
        params_file=PARAMS_FILE,
        metrics={
            "format": "paddle-pir-program",
            PROGRAM_FORMAT: "pir",
            "parameters": len(facts.parameter_dtypes),
            "parameter_dtypes": sorted(set(facts.parameter_dtypes.values())),
            "max_abs_diff_vs_trained": None,  # nothing was trained here to compare with
            "max_abs_diff_limit": None,
            "checked_samples": len(images),
            "output_shape": list(facts.outputs[0].shape) if facts.outputs else [],
            "reference": f"Paddle Inference's outputs of the PIR program on the first {len(images)} test images",
            # oneDNN off where an op of the program needs it (PP-OCRv5 mobile det: ArrayAttribute<DoubleAttribute>)
            "paddle_inference": paddle_run,
            "model_prefix": MODEL_PREFIX,
            FP32_ONNX: converted,  # the FP32 ONNX model quantize calibrates on and convert keeps
        },
    )
