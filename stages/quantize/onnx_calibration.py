"""INT8 calibrated by quantgate on an FP32 ONNX graph, for the lowering PaddleSlim's models take.

PaddleSlim reads no PIR program (PaddleOCR 3.x's format), so such a model is calibrated on its FP32 ONNX graph:
onnxruntime runs it over the calibration batches with every tensor PaddleSlim would measure added as an output,
the kernels PaddleSlim's statistics were re-implemented with (`calibration`, `fine_histogram`, `mse_search`)
measure them, and paddle's own rules turn the measurements into thresholds ('abs_max', 'avg', 'hist', 'KL',
'mse'); weights take their abs max per output channel ('channel_wise_abs_max') or per tensor ('abs_max').
The scales are then written as paddle2onnx 1.3.1 writes PaddleSlim's (`quantgate.int8.paddle2onnx_qdq`), so
`lower_int8_model(raw, out, calibration.program_scales, **lowering.options())` lowers the result unchanged.
A layer in `skip` keeps its FP32 weight and gets no Q/DQ pair: a fall-back is exact and costs no calibration.

    calibration = calibrate_onnx_graph(fp32_onnx, stored_batches(data, config), config, skip, out / "raw.onnx")
    lowered = lower_calibrated(calibration, out / "int8.onnx", Lowering())
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Protocol

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from paddle.static.quantization import PostTrainingQuantization
from paddle.static.quantization.cal_kl_threshold import cal_kl_threshold

from quantgate.int8 import onnx_equalization
from quantgate.int8.errors import ConversionError
from quantgate.int8.lower_int8 import Lowering, LoweringResult, lower_int8_model
from quantgate.int8.paddle2onnx_qdq import (
    PADDLE2ONNX_NAME,
    Layer,
    constants_as_initializers,
    fold_batch_norms,
    observed_tensors,
    quantizable_layers,
    write_qdq,
)
from quantgate.int8.paddle_quantization import WeightScales
from quantgate.samples.reading import StoredData
from quantgate.stages.quantize import fine_histogram, mse_search
from quantgate.stages.quantize.calibration import HISTOGRAM_METHODS, Statistics, _histogram
from quantgate.stages.quantize.ptq import calibration_batches, calibration_rows

CALIBRATED_BY = "quantgate on the ONNX graph (PaddleSlim reads no PIR program)"
ONNX_ALGOS = ("abs_max", "avg", "hist", "KL", "mse")
HISTOGRAM_BINS = 2048  # PaddleSlim's default histogram_bins
CalibrationBatches = Callable[[], Iterable[np.ndarray]]  # each call: the calibration batches afresh, in order


class OnnxRecipe(Protocol):
    """What a calibration on the ONNX graph reads of a recipe (QuantizeConfig has it all)."""

    algo: str
    hist_percent: float
    weight_quantize_type: str


@dataclass(frozen=True)
class OnnxCalibration:
    """A raw INT8 graph in paddle2onnx 1.3.1's pattern, the scales its program would hold, and what was done."""

    raw_onnx: Path
    program_scales: WeightScales  # as `paddle_program_scales` reads a PaddleSlim program: inputs and weights
    metrics: dict
    layers: tuple[str, ...]  # weights of the quantized layers, in graph order (the names `skip` takes)
    statistics: Statistics | None = None  # what was measured, for another recipe on the same batches


def stored_batches(data: StoredData, config) -> CalibrationBatches:
    """The data stage's calibration rows as quantize picks them (`ptq.calibration_rows`), in config.batch_size
    batches (32 when unset: the caller fits it to memory first, `pir_seam.onnx_graph_batch`), read afresh on each call.

    Raises:
        QuantizationError: the calibration split is too small for the requested batches.
    """
    batch_size = config.batch_size or 32
    batches = calibration_batches(data.size("calibration"), config)
    rows = calibration_rows(data.size("calibration"), batches * batch_size)
    chunks = [rows[start: start + batch_size] for start in range(0, len(rows), batch_size)]
    return lambda: (images for images, _ in data.fetch("calibration", chunks))


def _session(model: onnx.ModelProto, names: list[str]) -> ort.InferenceSession:
    """A CPU session returning `names` too (graph optimizations off: every tensor stays as the graph has it)."""
    measured = onnx.ModelProto()
    measured.CopyFrom(model)
    present = {output.name for output in measured.graph.output}
    measured.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names if name not in present)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    # No arena: it grows by powers of two and keeps what it grew to, so a batch's measured tensors (all of them
    # outputs) cost up to twice their size, and more than a probe at batches 1 and 2 can see (PP-OCRv4 rec at batch
    # 24: 8.0 GB peak with it)
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(measured.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _forward(session: ort.InferenceSession, names: list[str], batches: CalibrationBatches, timing: dict):
    """(batch index, {name: array}) for each calibration batch. The dict is emptied before the next batch runs: the
    caller's loop variable would otherwise keep one batch's measured tensors alive beside the next one's (twice
    the memory: PP-OCRv4 rec at batch 24 peaked at 8.0 GB)."""
    feed = session.get_inputs()[0].name
    for index, images in enumerate(batches()):
        started = time.perf_counter()
        values = dict(zip(names, session.run(names, {feed: np.ascontiguousarray(images, np.float32)})))
        timing["forward_s"] += time.perf_counter() - started
        yield index, values
        values.clear()


def measure(model: onnx.ModelProto, names: list[str], batches: CalibrationBatches, algo: str,
            histogram: str = "exact") -> tuple[Statistics, dict]:
    """What PaddleSlim's sampling passes measure for `algo` on tensors `names`, with its kernels; and the seconds
    spent ({"forward_s", "statistics_s"}). 'hist'/'KL' exact: a ranges pass, then a histogram pass."""
    session = _session(model, names)
    statistics, timing = Statistics(0), {"forward_s": 0.0, "statistics_s": 0.0}
    one_pass = algo in ("hist", "KL") and histogram == "one_pass"
    if one_pass:
        statistics.fine_histograms = {}
    if algo == "mse":
        statistics.mse_losses = {}
    for index, values in _forward(session, names, batches, timing):
        started = time.perf_counter()
        for name, value in values.items():
            value = value.reshape(1, -1) if value.ndim == 0 else value
            if value.dtype != np.float32:  # not measured, as an empty tensor is not
                statistics.zero_size.add(name)
            elif statistics.add_ranges(name, value, fine=one_pass) and algo == "mse":
                statistics.mse_losses.setdefault(name, []).append(mse_search.losses(value))
        statistics.batches = index + 1
        timing["statistics_s"] += time.perf_counter() - started
    if one_pass:
        statistics.fine_histograms = {name: fine_histogram.trimmed(counts)
                                      for name, counts in statistics.fine_histograms.items()}
    elif algo in ("hist", "KL"):
        statistics.histograms = {}
        for _, values in _forward(session, names, batches, timing):
            started = time.perf_counter()
            for name, value in values.items():
                if name in statistics.row_abs_max:
                    counts = _histogram(value, statistics.histogram_edges(name, HISTOGRAM_BINS))
                    previous = statistics.histograms.get(name)
                    statistics.histograms[name] = counts if previous is None else previous + counts
            timing["statistics_s"] += time.perf_counter() - started
    return statistics, timing


def thresholds(statistics: Statistics, algo: str, hist_percent: float) -> dict[str, float]:
    """Each measured tensor's clipping threshold by `algo`, as paddle's PostTrainingQuantization takes it."""
    hist_rule = SimpleNamespace(_hist_percent=hist_percent)
    found = {}
    for name in statistics.row_abs_max:
        if algo == "abs_max":
            found[name] = statistics.abs_max(name)
        elif algo == "avg":  # the mean over batches of each batch's mean per-sample max |x|
            found[name] = float(np.array([float(np.mean(rows)) for rows in statistics.row_abs_max[name]]).mean())
        elif algo == "mse":
            found[name] = mse_search.threshold(statistics.mse_losses[name])
        else:
            counts, edges = statistics.histogram(name, HISTOGRAM_BINS), statistics.histogram_edges(name, HISTOGRAM_BINS)
            found[name] = float(PostTrainingQuantization._get_hist_scaling_factor(hist_rule, counts, edges)
                                if algo == "hist" else cal_kl_threshold(counts, edges[1] - edges[0], 8))
    return found


def weight_scales(model: onnx.ModelProto, layers: list[Layer], weight_quantize_type: str) -> WeightScales:
    """Each layer weight's scale (abs max / 127): per output channel along the layer's axis, or per tensor."""
    initializers = {init.name: init for init in model.graph.initializer}
    scales: WeightScales = {}
    for layer in layers:
        weight = np.abs(numpy_helper.to_array(initializers[layer.weight]).astype(np.float32))
        if weight_quantize_type == "abs_max":
            scales[layer.weight] = (np.array([weight.max()], np.float32) / np.float32(127), None)
        else:
            channels = np.moveaxis(weight, layer.axis, 0).reshape(weight.shape[layer.axis], -1)
            scales[layer.weight] = (channels.max(axis=1).astype(np.float32) / np.float32(127), layer.axis)
    return scales


def _check(recipe: OnnxRecipe, histogram: str, skip: tuple[str, ...], layers: list[Layer]) -> None:
    """Refuse what this calibration does not do, naming the fix."""
    problems = []
    if recipe.algo not in ONNX_ALGOS:
        problems.append(f"algo {recipe.algo!r} (calibration on the ONNX graph does {', '.join(ONNX_ALGOS)})")
    if getattr(recipe, "bias_correction", False):
        problems.append("bias_correction (PaddleSlim's, on a Paddle program; set it false)")
    if getattr(recipe, "rounding", "nearest") not in (None, "nearest"):
        problems.append(f"rounding {recipe.rounding!r} (AdaRound runs on a Paddle program; use 'nearest')")
    if recipe.weight_quantize_type not in ("channel_wise_abs_max", "abs_max"):
        problems.append(f"weight_quantize_type {recipe.weight_quantize_type!r}")
    if histogram not in HISTOGRAM_METHODS:
        problems.append(f"histogram {histogram!r} (one of {HISTOGRAM_METHODS})")
    unknown = sorted(set(skip) - {layer.weight for layer in layers if layer.weight})
    if unknown:
        problems.append(f"skip names {unknown}, which are no layer weights of the graph")
    if problems:
        raise ValueError("cannot calibrate on the ONNX graph with " + "; ".join(problems))


def calibrate_onnx_graph(fp32_onnx: Path, batches: CalibrationBatches, recipe: OnnxRecipe, skip: tuple[str, ...],
                         out_raw: Path, histogram: str = "exact", statistics: Statistics | None = None,
                         equalize: bool = False) -> OnnxCalibration:
    """Calibrate the FP32 ONNX graph by `recipe` on `batches` and write paddle2onnx 1.3.1's raw INT8 graph to `out_raw`.

    `skip`: weight names of layers left in FP32 (no Q/DQ pair, FP32 weight). `histogram`: 'exact' (PaddleSlim's
    two passes) or 'one_pass' ('hist' and 'KL' only). `statistics`: what an earlier call measured on the same graph
    and batches for the same kind of algorithm; the passes are then not run again. `equalize`: rescale each
    conv → depthwise conv chain's tensor channel by channel first (`onnx_equalization`, from the per-channel ranges
    on `batches`), as quantize.equalize_depthwise_inputs does on a Paddle program.

    Raises:
        ValueError: a recipe setting this calibration does not do, or a skip name that is no layer weight.
        ConversionError: the graph has no layer to quantize, or the raw graph fails onnx.checker.
    """
    started = time.perf_counter()
    model = constants_as_initializers(onnx.load(str(fp32_onnx)))
    folded = fold_batch_norms(model)
    ranges = None
    if equalize:  # the ranges measured on these batches before, else one pass for them now
        ranges = statistics.channel_abs_max if statistics is not None and statistics.channel_abs_max is not None \
            else _channel_ranges(model, batches)
    equalized = onnx_equalization.equalize(model, ranges) if ranges else []
    layers = quantizable_layers(model)
    _check(recipe, histogram, skip, layers)
    quantized = [layer for layer in layers if layer.weight is None or layer.weight not in skip]
    if not any(layer.weight for layer in quantized):
        raise ConversionError(f"{Path(fp32_onnx).name} has no Conv/MatMul layer left to quantize (skip: {len(skip)})")
    names = observed_tensors(model, layers)
    timing = {"forward_s": 0.0, "statistics_s": 0.0}
    if statistics is None or not _holds(statistics, recipe.algo, histogram):
        statistics, timing = measure(model, names, batches, recipe.algo, histogram)
    if ranges is not None:
        statistics.channel_abs_max = ranges
    activation_scales = {name: threshold / 127 for name, threshold in
                         thresholds(statistics, recipe.algo, recipe.hist_percent).items()}
    weights = weight_scales(model, [layer for layer in quantized if layer.weight], recipe.weight_quantize_type)
    program_scales = _program_scales(weights, activation_scales)
    pairs = write_qdq(model, activation_scales, weights)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"the raw INT8 graph written from {Path(fp32_onnx).name} fails onnx.checker: {exc}") \
            from exc
    Path(out_raw).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_raw))
    layer_weights = tuple(layer.weight for layer in quantized if layer.weight)
    metrics = {
        "calibrated_by": CALIBRATED_BY,
        "recipe": {"algo": recipe.algo, "hist_percent": recipe.hist_percent,
                   "weight_quantize_type": recipe.weight_quantize_type},
        "calibration_histogram": histogram if recipe.algo in ("hist", "KL") else None,
        "calibration_batches": statistics.batches,
        "calibration_statistics_reused": not timing["forward_s"],
        "calibration_forward_s": round(timing["forward_s"], 3),
        "calibration_statistics_s": round(timing["statistics_s"], 3),
        "measured_tensors": len(statistics.row_abs_max),
        "folded_batch_norms": folded,
        "equalized_tensors": equalized,
        "quantized_layers": len(layer_weights),
        "skip_tensors": list(skip),
        "qdq_pairs": pairs,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return OnnxCalibration(Path(out_raw), program_scales, metrics, layer_weights, statistics)


def _channel_ranges(model: onnx.ModelProto, batches: CalibrationBatches) -> dict[str, np.ndarray]:
    """Per channel, the max |x| over `batches` of each conv → depthwise conv chain's tensor (`onnx_equalization`)."""
    tensors = [conv.output[0] for conv, _ in onnx_equalization.depthwise_pairs(model)]
    ranges: dict[str, np.ndarray] = {}
    if tensors:
        for _, values in _forward(_session(model, tensors), tensors, batches, {"forward_s": 0.0}):
            for name, value in values.items():
                ranges[name] = np.maximum(ranges.get(name, 0.0), onnx_equalization.channel_abs_max(value))
    return ranges


def _program_scales(weights: WeightScales, activation_scales: dict[str, float]) -> WeightScales:
    """The scales PaddleSlim's program would hold (`paddle_program_scales`): weights, and every measured activation
    (its onnx_format program quantizes each observed output) under a name a Paddle program has. paddle2onnx's own
    tensor names ("Add.5": an op mapped to several nodes) are no program's, so a MatMul reading one keeps the
    float it keeps on the PaddleSlim path (`_restore_dropped_linear_scales` needs all three of its names)."""
    scales = dict(weights)
    scales.update({name: (np.array([scale], np.float32), None) for name, scale in activation_scales.items()
                   if not PADDLE2ONNX_NAME.fullmatch(name)})
    return scales


def _holds(statistics: Statistics, algo: str, histogram: str) -> bool:
    """Whether `statistics` already holds what `algo` needs."""
    if algo == "mse":
        return statistics.mse_losses is not None
    if algo in ("hist", "KL"):
        return (statistics.fine_histograms is not None) if histogram == "one_pass" else \
            statistics.histograms is not None
    return bool(statistics.row_abs_max)


def lower_calibrated(calibration: OnnxCalibration, out_onnx: Path, lowering: Lowering | None = None) -> LoweringResult:
    """`lower_int8_model` on the raw graph with the scales its program would hold; the record says who calibrated.

    Raises:
        ConversionError: as `lower_int8_model`.
    """
    result = lower_int8_model(onnx.load(str(calibration.raw_onnx)), out_onnx, calibration.program_scales,
                              name=calibration.raw_onnx.name, **(lowering or Lowering()).options())
    result.metrics["calibrated_by"] = CALIBRATED_BY
    return result
