"""INT8 calibrated by quantgate on a PIR export's FP32 ONNX graph: the quantize stage's output for
`strategy: single` (`calibrate_single`), and the search's producer for a PIR model (`OnnxGraphProducer`), whose
candidates are judged through the same seam as PaddleSlim's (`TrialRunner.judge`).

PaddleSlim reads no PIR program, so the recipe (quantize.algo, hist_percent, weight_quantize_type) is applied by
`onnx_calibration` to tensors onnxruntime fetches from the graph; a fall-back is a skip list (the layer keeps its
FP32 weight and gets no Q/DQ pair: exact). What the convert stage lowers is the raw Q/DQ graph and the scales its
program would hold (`quantgate.int8.calibrated_graph`), in place of PaddleSlim's program. Recipes this calibration
does not do (bias_correction, AdaRound) are refused by name: the search records them as failed recipes.

In the search, what a calibration measured is kept for the search (by the rows it read) and reused by every recipe
and skip list it holds enough for, so a fall-back's "estimate" is a real calibration from those statistics: its
Q/DQ pairs dropped, lowered and scored (`OnnxGraphEstimator`). Trials' calibrations are cached by content digest
(the FP32 ONNX bytes, the calibration split, the recipe, the skip list and the rows); the estimates are not.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable
from importlib.metadata import version as installed_version
from pathlib import Path

import onnx

from quantgate.config import QuantizeConfig, QuantizeRecipe
from quantgate.int8.calibrated_graph import (
    CALIBRATED_BY,
    load_program_scales,
    lower_calibrated_files,
    save_program_scales,
)
from quantgate.int8.float_groups import feeding_grids
from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.paddle_quantization import read_paddle_quantization
from quantgate.int8.scale_propagation import propagate_scales
from quantgate.samples.reading import StoredData
from quantgate.stages.quantize.calibration import Statistics
from quantgate.stages.quantize.candidate_cache import (
    CALIBRATION_METRICS,
    Cache,
    CalibrationFolders,
    content_digest,
    files_digest,
)
from quantgate.stages.quantize.onnx_calibration import OnnxCalibration, calibrate_onnx_graph, stored_batches
from quantgate.stages.quantize.outputs import CALIBRATED_BY as CALIBRATED_BY_KEY
from quantgate.stages.quantize.outputs import CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE
from quantgate.stages.quantize.pir_seam import require_onnx_graph
from quantgate.stages.quantize.runtime_checks import Candidate
from quantgate.stages.quantize.trial_candidate import trial_candidate
from quantgate.stages.quantize.validation_check import ValidationCheck

log = logging.getLogger(__name__)

ONNX_GRAPH = "onnx-graph"  # the producer's name in a candidate's record
RECIPE_FIELDS = ("algo", "hist_percent", "bias_correction", "weight_quantize_type", "rounding")
# What decides a calibration on the ONNX graph besides the graph and the images (bias_correction and rounding are
# refused, never run); and what decides the statistics it measures (the rows and batches).
CALIBRATION_FIELDS = ("algo", "hist_percent", "weight_quantize_type", "batch_size", "batch_nums",
                      "max_calibration_samples", "skip_tensors", "calibration_histogram", "equalize_depthwise_inputs")
STATISTICS_FIELDS = ("batch_size", "batch_nums", "max_calibration_samples", "calibration_histogram",
                     "equalize_depthwise_inputs")
CALIBRATION_FORMAT = "quantgate-onnx-graph-calibration-1"  # the files a cached calibration folder holds


def refused_recipe(config: QuantizeConfig) -> str | None:
    """Why calibration on the ONNX graph cannot run `config`'s recipe (the fix named), or None when it can."""
    if config.bias_correction:
        return "bias_correction is PaddleSlim's, on a Paddle program: not done on the ONNX graph"
    if config.rounding == "adaptive":
        return "AdaRound (rounding: adaptive) fits weights on a Paddle program: not done on the ONNX graph"
    return None


def _calibrate(config: QuantizeConfig, fp32_onnx: Path, data: StoredData, skip: tuple[str, ...],
               out_raw: Path, statistics: Statistics | None = None) -> OnnxCalibration:
    # The graph is paddle2onnx 2.x's normalised into 1.3.1's shapes already (the export stage: quantgate/pir).
    return calibrate_onnx_graph(fp32_onnx, stored_batches(data, config), config, skip, out_raw,
                                histogram=config.calibration_histogram, statistics=statistics,
                                equalize=config.equalize_depthwise_inputs)


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
    metrics = calibration_metrics(config, calibration, fp32_onnx, data)
    log.info("quantize: %s calibration on the ONNX graph (PaddleSlim reads no PIR program), %d layers, %d Q/DQ "
             "pairs, %.1f s", config.algo, len(calibration.layers), calibration.metrics["qdq_pairs"],
             calibration.metrics["seconds"])
    return metrics


def calibration_metrics(config: QuantizeConfig, calibration: OnnxCalibration, fp32_onnx: Path,
                        data: StoredData) -> dict:
    """The quantize manifest's metrics of `calibration` (of `fp32_onnx` by `config`, on `data`'s calibration
    split), as `strategy: single` writes them."""
    metrics = calibration.metrics
    samples = min(metrics["calibration_batches"] * (config.batch_size or 32), data.size("calibration"))
    ops = _op_counts(calibration.raw_onnx)
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
        "equalized_tensors": metrics["equalized_tensors"],  # conv → depthwise conv chains (onnx_equalization)
        "fp32_ops": _op_counts(fp32_onnx),
        "int8_ops": ops,
    }


def _op_counts(model: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in onnx.load(str(model), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def _covers(statistics: Statistics, algo: str, histogram: str) -> bool:
    """Whether `statistics` holds what `algo` reads (so `calibrate_onnx_graph` runs no forward pass for it)."""
    if algo == "mse":
        return statistics.mse_losses is not None
    if algo in ("hist", "KL"):
        return (statistics.fine_histograms if histogram == "one_pass" else statistics.histograms) is not None
    return bool(statistics.row_abs_max)


class OnnxGraphProducer:
    """The search's candidates for a PIR export: calibrated on its FP32 ONNX graph (cached by content digest, the
    measured statistics reused across recipes and skip lists), lowered as the convert stage will. They have no
    Paddle program: Paddle Inference is not applicable to them."""

    name = ONNX_GRAPH
    written_files = (CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE)  # what `calibrate_single` writes; convert lowers them
    fp32_program = None

    def __init__(self, model_dir: Path, data: StoredData, scratch: Path, cache: Cache | None, lowering: Lowering):
        """
        Raises:
            PirNotQuantizable: the export holds no FP32 ONNX model.
        """
        self.fp32_onnx = require_onnx_graph(model_dir)  # the export's, checked against Paddle there
        self.data, self.scratch, self.lowering = data, Path(scratch), lowering
        self.inputs_digest = content_digest(
            files_digest(self.fp32_onnx), data.split_digest("calibration"), CALIBRATION_FORMAT,
            {library: installed_version(library) for library in ("onnx", "onnxruntime", "paddlepaddle")})
        self._folders = CalibrationFolders(self.scratch, cache)
        self._statistics: dict[str, list[Statistics]] = {}  # by the rows they were measured on (STATISTICS_FIELDS)

    def calibrate(self, settings: QuantizeConfig) -> tuple[Path, str, bool]:
        """The folder of `settings`' calibration (CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE, CALIBRATION_METRICS),
        its digest, and whether it was made before (this search or the cache).

        Raises:
            ValueError: a recipe this calibration does not do (`refused_recipe`), or a skip name that is no layer.
            ConversionError: the calibration failed.
        """
        why = refused_recipe(settings)
        if why is not None:
            raise ValueError(f"not calibrated on the ONNX graph: {why}")
        digest = content_digest(self.inputs_digest, {name: getattr(settings, name) for name in CALIBRATION_FIELDS})
        folder, cached = self._folders.folder(digest, lambda into: self._calibrate_into(settings, into))
        return folder, digest, cached

    def _calibrate_into(self, settings: QuantizeConfig, folder: Path) -> None:
        key = json.dumps({name: getattr(settings, name) for name in STATISTICS_FIELDS}, sort_keys=True)
        known = self._statistics.setdefault(key, [])
        usable = next((kept for kept in known if _covers(kept, settings.algo, settings.calibration_histogram)), None)
        calibration = _calibrate(settings, self.fp32_onnx, self.data, tuple(settings.skip_tensors),
                                 folder / CALIBRATED_ONNX_FILE, usable)
        if calibration.statistics is not None and all(kept is not calibration.statistics for kept in known):
            known.append(calibration.statistics)
        save_program_scales(calibration.program_scales, folder / PROGRAM_SCALES_FILE)
        metrics = calibration_metrics(settings, calibration, self.fp32_onnx, self.data)
        (folder / CALIBRATION_METRICS).write_text(json.dumps(metrics, sort_keys=True, indent=2) + "\n")

    def candidate(self, index: int, settings: QuantizeConfig, float_layers: tuple[str, ...]) -> Candidate:
        """`settings` calibrated on the ONNX graph (or taken from the cache) and lowered, for trial `index`."""
        def lower(calibration: Path, int8_onnx: Path) -> dict:
            lower_calibrated_files(calibration / CALIBRATED_ONNX_FILE, calibration / PROGRAM_SCALES_FILE, int8_onnx,
                                   self.lowering)
            return {"program": None, "unlowered_onnx": calibration / CALIBRATED_ONNX_FILE,
                    "calibration_folder": calibration}
        return trial_candidate(ONNX_GRAPH, self.scratch, index, settings, float_layers, self.calibrate, lower)

    # -- fall-backs -----------------------------------------------------------------------

    def layers(self, base) -> list[str]:
        """The layers the `base` trial's calibration quantized (weight names, graph order)."""
        return list(json.loads((Path(base.folder) / CALIBRATION_METRICS).read_text())["quantized_layers"])

    def lowered_without(self, settings: QuantizeConfig, layers: tuple[str, ...], out_onnx: Path) -> None:
        """`settings` with `layers` left FP32 (their Q/DQ pairs dropped), calibrated from the statistics already
        measured and lowered into `out_onnx`; not cached (an estimate)."""
        skipping = settings.with_recipe(QuantizeRecipe(), tuple(layers))
        if (why := refused_recipe(skipping)) is not None:
            raise ValueError(f"not calibrated on the ONNX graph: {why}")
        with tempfile.TemporaryDirectory(prefix="estimate-", dir=self.scratch) as work:
            self._calibrate_into(skipping, Path(work))
            lower_calibrated_files(Path(work) / CALIBRATED_ONNX_FILE, Path(work) / PROGRAM_SCALES_FILE, out_onnx,
                                   self.lowering)

    def estimator(self, base, base_settings: QuantizeConfig, twin_settings: QuantizeConfig | None,
                  layers: Iterable[str], skipped: tuple[str, ...], check: ValidationCheck,
                  number: int) -> OnnxGraphEstimator:
        """Fall-backs of `base` scored by real calibrations from its statistics (no AdaRound base here: refused)."""
        return OnnxGraphEstimator(self, base, base_settings, [layer for layer in layers if layer not in skipped],
                                  check)


class OnnxGraphEstimator:
    """`FallbackEstimator`'s shape for a calibration on the ONNX graph, where nothing needs estimating: a layer in
    FP32 is its Q/DQ pairs dropped, every other scale unchanged, so each score is a real calibration's, from the
    statistics the base measured (no forward pass), lowered and scored in onnxruntime."""

    def __init__(self, producer: OnnxGraphProducer, base, settings: QuantizeConfig, layers: list[str],
                 check: ValidationCheck):
        self.producer, self.base, self.settings, self.check = producer, base, settings, check
        self.float_weights = dict.fromkeys(layers)  # every layer's fall-back can be scored (the names are what count)

    def score(self, float_layers: Iterable[str]) -> dict:
        with tempfile.TemporaryDirectory(prefix="quantgate-estimate-") as scratch:
            lowered = Path(scratch) / "estimate.onnx"
            self.producer.lowered_without(self.settings, tuple(float_layers), lowered)
            return {**self.check.score(lowered), "measured_by": ONNX_GRAPH}

    def group_grids(self, layer: str) -> list[str]:
        """The activation grids `layer`'s FP32 fall-back drops with it, read off the base's raw graph as the lowering
        reads them (as `FallbackEstimator.group_grids`); empty where the lowering leaves them."""
        if not self.producer.lowering.float_groups:
            return []
        raw = onnx.load(str(self.base.paddle2onnx_file))
        scales = load_program_scales(Path(self.base.folder) / PROGRAM_SCALES_FILE)
        quantization = read_paddle_quantization(raw, {name: value for name, value in scales.items() if name != layer})
        propagated = propagate_scales(quantization.float_model, quantization.activation_scales).activation_scales
        return feeding_grids(quantization.float_model.graph, (layer,), propagated).get(layer, [])
