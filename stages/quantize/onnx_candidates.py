"""INT8 calibrated by quantgate on a PIR export's FP32 ONNX graph: the quantize stage's output for
`strategy: single`, and a producer of search candidates (`onnx_graph_candidate`) judged through the same seam as
PaddleSlim's (`TrialRunner.judge`).

PaddleSlim reads no PIR program, so the recipe (quantize.algo, hist_percent, weight_quantize_type) is applied by
`onnx_calibration` to tensors onnxruntime fetches from the graph; a fall-back is a skip list (the layer keeps its
FP32 weight and gets no Q/DQ pair: exact, no calibration). What the convert stage lowers is the raw Q/DQ graph and
the scales its program would hold (`quantgate.int8.calibrated_graph`), in place of PaddleSlim's program. Recipes
this calibration does not do (bias_correction, AdaRound) are refused by name.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import onnx

from quantgate.config import QuantizeConfig
from quantgate.int8.calibrated_graph import CALIBRATED_BY, save_program_scales
from quantgate.int8.lower_int8 import Lowering
from quantgate.samples.reading import StoredData
from quantgate.stages.quantize.onnx_calibration import (
    OnnxCalibration,
    calibrate_onnx_graph,
    lower_calibrated,
    stored_batches,
)
from quantgate.stages.quantize.outputs import CALIBRATED_BY as CALIBRATED_BY_KEY
from quantgate.stages.quantize.outputs import CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE
from quantgate.stages.quantize.runtime_checks import Candidate

log = logging.getLogger(__name__)

ONNX_GRAPH = "onnx-graph"  # the producer's name in a candidate's record
RECIPE_FIELDS = ("algo", "hist_percent", "bias_correction", "weight_quantize_type", "rounding")


def refused_recipe(config: QuantizeConfig) -> str | None:
    """Why calibration on the ONNX graph cannot run `config`'s recipe (the fix named), or None when it can."""
    if config.bias_correction:
        return "bias_correction is PaddleSlim's, on a Paddle program: not done on the ONNX graph"
    if config.rounding == "adaptive":
        return "AdaRound (rounding: adaptive) fits weights on a Paddle program: not done on the ONNX graph"
    return None


def _calibrate(config: QuantizeConfig, fp32_onnx: Path, data: StoredData, skip: tuple[str, ...],
               out_raw: Path) -> OnnxCalibration:
    # Where paddle2onnx 2.x graphs get normalised for the lowering's patterns (quantgate/int8/onnx_normalise.py,
    # being written beside this) belongs here: after reading the FP32 ONNX graph, before calibrating it.
    return calibrate_onnx_graph(fp32_onnx, stored_batches(data, config), config, skip, out_raw,
                                histogram=config.calibration_histogram)


def calibrate_single(config: QuantizeConfig, fp32_onnx: Path, data: StoredData, out_dir: Path) -> dict:
    """`config`'s recipe calibrated on `fp32_onnx` (quantize.skip_tensors left FP32), written for the convert stage
    (CALIBRATED_ONNX_FILE and PROGRAM_SCALES_FILE in `out_dir`); returns the manifest's metrics.

    Raises:
        QuantizationError: the calibration split is too small for the requested batches.
        ValueError: a recipe setting calibration on the ONNX graph does not do (the message names it).
        ConversionError: the graph has no layer to quantize, or the raw graph fails onnx.checker.
    """
    why = refused_recipe(config)
    if why is not None:
        raise ValueError(f"cannot calibrate a PIR model's INT8 with this recipe: {why}; set "
                         "quantize.bias_correction: false and quantize.rounding: nearest")
    out_dir = Path(out_dir)
    calibration = _calibrate(config, fp32_onnx, data, tuple(config.skip_tensors), out_dir / CALIBRATED_ONNX_FILE)
    save_program_scales(calibration.program_scales, out_dir / PROGRAM_SCALES_FILE)
    metrics = calibration.metrics
    samples = min(metrics["calibration_batches"] * (config.batch_size or 32), data.size("calibration"))
    ops = _op_counts(out_dir / CALIBRATED_ONNX_FILE)
    log.info("quantize: %s calibration on the ONNX graph (PaddleSlim reads no PIR program), %d layers, %d Q/DQ "
             "pairs, %.1f s", config.algo, metrics["quantized_layers"], metrics["qdq_pairs"], metrics["seconds"])
    return {
        CALIBRATED_BY_KEY: CALIBRATED_BY,
        "algo": config.algo,
        "recipe": {name: getattr(config, name) for name in RECIPE_FIELDS},
        "skip_tensors": list(config.skip_tensors),
        "calibration_batches": metrics["calibration_batches"],
        "calibration_samples": samples,
        "calibration_forward_batches": metrics["calibration_batches"],
        "calibration_forward_s": metrics["calibration_forward_s"],
        "calibration_statistics_s": metrics["calibration_statistics_s"],
        "calibration_statistics_reused": metrics["calibration_statistics_reused"],
        "calibration_histogram": metrics["calibration_histogram"],
        "onnx_graph_calibration": {key: metrics[key] for key in
                                   ("measured_tensors", "folded_batch_norms", "quantized_layers", "qdq_pairs",
                                    "seconds")},
        "quantized_layers": list(calibration.layers),
        "quantize_linear_ops": ops.get("QuantizeLinear", 0),
        "dequantize_linear_ops": ops.get("DequantizeLinear", 0),
        "equalized_tensors": [],
        "fp32_ops": _op_counts(fp32_onnx),
        "int8_ops": ops,
    }


def _op_counts(model: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in onnx.load(str(model), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def onnx_graph_candidate(settings: QuantizeConfig, fp32_onnx: Path, data: StoredData, skip: tuple[str, ...],
                         folder: Path, lowering: Lowering) -> Candidate:
    """The producer calibration on the ONNX graph is: `settings`' recipe with the layers of `skip` (weight names)
    left FP32, calibrated on `fp32_onnx` and lowered as the convert stage will, as a `Candidate` for
    `TrialRunner.judge`. It has no Paddle program: Paddle Inference is not applicable to it.

    Raises:
        ValueError: a recipe calibration on the ONNX graph does not do (`refused_recipe`), or a skip name that is
            no layer weight.
        ConversionError: the calibration or the lowering failed.
    """
    why = refused_recipe(settings)
    if why is not None:
        raise ValueError(why)
    started = time.monotonic()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    calibration = _calibrate(settings, fp32_onnx, data, tuple(skip), folder / CALIBRATED_ONNX_FILE)
    calibration_s = time.monotonic() - started
    lower_calibrated(calibration, folder / "int8.onnx", lowering)
    metrics = calibration.metrics
    return Candidate(
        int8_onnx=folder / "int8.onnx", program=None, recipe={name: getattr(settings, name) for name in RECIPE_FIELDS},
        float_layers=tuple(skip),
        calibration_samples=min(metrics["calibration_batches"] * (settings.batch_size or 32),
                                data.size("calibration")),
        calibration_digest="", calibration_s=calibration_s, produced_s=time.monotonic() - started,
        producer=ONNX_GRAPH, statistics_reused=bool(metrics["calibration_statistics_reused"]),
        unlowered_onnx=folder / CALIBRATED_ONNX_FILE)
