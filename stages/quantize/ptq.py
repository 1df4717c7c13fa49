"""Quantize stage: PaddleSlim post-training INT8 quantization, calibrated on the held-out split, streamed batch by batch.

PaddleSlim's `quant_post_static` is what runs, with paddle's `PostTrainingQuantization` swapped for
`calibration.Calibration` where it covers the algorithm (same scales, faster sampling, reusable statistics).
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle
from paddle.static.quantization import PostTrainingQuantization

from quantgate.config import QuantizeConfig
from quantgate.errors import BadInput, StageError
from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.static_graph import load_program, op_counts, release_scope, static_mode
from quantgate.memory import BATCHES_KEY
from quantgate.progress import Progress
from quantgate.samples.reading import StoredData, open_data
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE  # the INT8 model keeps the FP32 file names
from quantgate.stages.quantize.adaround import adaround, save
from quantgate.stages.quantize.calibration import STATISTIC_ALGOS, Calibration, Statistics
from quantgate.stages.quantize.equalization import depthwise_inputs, equalized_copy
from quantgate.stages.quantize.memory_fit import (
    CALIBRATION_LOOP,
    calibration_choice,
    calibration_passes,
    choice_record,
    fitted,
)
from quantgate.stages.quantize.quantized_weights import round_weights_to_bits

log = logging.getLogger(__name__)


class QuantizationError(StageError, BadInput):
    """PaddleSlim could not quantize the model with the given settings."""


@dataclass(frozen=True)
class QuantizeResult:
    model_file: str
    params_file: str
    metrics: dict
    statistics: Statistics | None = None  # what calibration measured, for a later one with other thresholds


def calibration_batches(samples: int, config: QuantizeConfig) -> int:
    """How many calibration batches will run.

    Raises:
        QuantizationError: the calibration split is empty, or holds fewer batches than were asked for.
    """
    if samples <= 0:
        raise QuantizationError("the calibration split is empty; raise data.calibration_fraction")
    batch_size = config.batch_size or 1  # not chosen yet (before the run): only the split's size can be checked
    available = math.ceil(samples / batch_size)
    if config.batch_nums is None:
        cap = samples if config.max_calibration_samples is None else min(samples, config.max_calibration_samples)
        return math.ceil(cap / batch_size)
    if config.batch_nums > available:
        raise QuantizationError(
            f"quantize.batch_nums={config.batch_nums} with quantize.batch_size={config.batch_size} needs "
            f"{config.batch_nums * config.batch_size} calibration samples, but the calibration split has {samples} "
            f"({available} batches); lower quantize.batch_nums or raise data.calibration_fraction"
        )
    return config.batch_nums


def calibration_rows(samples: int, wanted: int) -> np.ndarray:
    """Which rows of the calibration split to calibrate on: all of them, or `wanted` spread evenly over it.

    The split is stored class by class, so its first rows would be the first classes only; evenly spaced
    rows keep every class in its share, and the same rows on every run.
    """
    if wanted >= samples:
        return np.arange(samples)
    return np.unique(np.linspace(0, samples - 1, wanted).round().astype(np.int64))


def quantize(
    config: QuantizeConfig, model_dir: Path, model_file: str, params_file: str, data_dir: Path, out_dir: Path,
    num_workers: int = 0, weight_bits: int = 8, hardswish_grids: bool = False,
) -> QuantizeResult:
    """Run PaddleSlim `quant_post_static` on the exported FP32 model, calibrated on the data stage's calibration split.

    `num_workers`: processes decoding image files for each calibration pass (0: in this process).
    The calibration batch is quantize.batch_size when it fits the memory budget, else the largest that does
    (`memory_fit`); the manifest records it and why.
    `weight_bits`: 7 puts the conv/matmul weights (not the depthwise ones) on a 7-bit grid rounded from FP32, for a
    CPU whose onnxruntime INT8 kernels saturate with 8-bit weights (`quantized_weights`); 8 keeps PaddleSlim's.
    `hardswish_grids`: convert.hardswish_grids, the lowering AdaRound fits each layer through (`deployed_inputs`).

    Raises:
        QuantizationError: the calibration split is too small for the requested batches.
        MemoryRefused: one calibration sample does not fit the memory budget.
        DataError: `data_dir` is not a data stage's output, or an image changed since the data stage.
    """
    data = open_data(data_dir)
    choice = calibration_choice(config, model_dir, data)
    result = quantize_with_data(fitted(config, choice), model_dir, model_file, params_file, data, out_dir,
                                num_workers=num_workers, weight_bits=weight_bits,
                                adaround_lowering=Lowering(weight_bits, hardswish_grids))
    result.metrics[BATCHES_KEY] = {CALIBRATION_LOOP: choice_record(config, choice)}
    return result


def quantize_with_data(
    config: QuantizeConfig, model_dir: Path, model_file: str, params_file: str, data: StoredData, out_dir: Path,
    num_workers: int = 0, allow_float: bool = False, statistics: Statistics | None = None, weight_bits: int = 8,
    adaround_lowering: Lowering | None = None,
) -> QuantizeResult:
    """Run PaddleSlim's post-training quantization (ONNX-style quantize_linear ops) calibrated on `data`'s
    calibration split, as `quant_post_static` runs it.

    The split is streamed: each pass reads it afresh, one batch at a time, so no more than a batch of
    images is in memory whatever the split's size.
    `allow_float`: accept a model with nothing quantized (the search skips every layer on purpose).
    `statistics`: what a calibration of the same model, rows and batch size measured ('hist', 'KL',
    'abs_max', 'avg'); the passes it holds are not run again.
    `weight_bits`: as in `quantize`. `adaround_lowering`: with `rounding: adaptive`, each layer is fitted on the
    input the model lowered so feeds it (the graph that runs); None: on the input PaddleSlim's program feeds it.

    Raises:
        QuantizationError: the split is too small for the requested batches, or nothing was quantized.
        DataChanged: an image file changed since the data stage recorded it.
    """
    if config.batch_size is None:  # the batch is chosen for this machine's memory (`quantize` records why)
        config = fitted(config, calibration_choice(config, model_dir, data))
    passes = calibration_passes(config, model_dir, data) if config.algo in STATISTIC_ALGOS else 1
    batches = calibration_batches(data.size("calibration"), config)
    rows = calibration_rows(data.size("calibration"), batches * config.batch_size)
    chunks = [rows[start: start + config.batch_size] for start in range(0, len(rows), config.batch_size)]
    started = time.perf_counter()
    log.info("quantize: PaddleSlim %s calibration on %d batches of %d samples%s", config.algo, batches,
             config.batch_size, f", each pass split over {passes} to fit the memory budget" if passes > 1 else "")
    fed: list[list[int]] = []  # [batches, samples] fed in each calibration pass

    with static_mode(), tempfile.TemporaryDirectory(prefix="quantgate-equalized-") as scratch:
        fp32 = load_program(Path(model_dir) / Path(model_file).stem)
        fp32_ops = op_counts(fp32.program)
        equalized = []
        if config.equalize_depthwise_inputs and depthwise_inputs(fp32.program):
            with closing(data.fetch("calibration", chunks, num_workers)) as stream:
                equalized = equalized_copy(fp32, (images for images, _ in stream),
                                           Path(scratch) / Path(MODEL_FILE).stem)
        release_scope(fp32.scope)  # nothing below runs it: its tensors are not calibration's to hold beside its own
        if equalized:  # PaddleSlim calibrates the rescaled copy; the export stays as it was
            model_dir, model_file, params_file = scratch, MODEL_FILE, PARAMS_FILE
            log.info("quantize: %s rescaled channel by channel for its depthwise conv (channel ranges %s apart)",
                     ", ".join(e.tensor for e in equalized),
                     ", ".join(f"{e.range_ratio_before:.0f}x" for e in equalized))

        def calibration_feed():  # iterated once per calibration pass ('hist' and 'KL' make two unless one_pass)
            fed.append([0, 0])
            progress = Progress(log, f"quantize calibration pass {len(fed)}, batch", batches, every_s=5.0)
            stream = data.fetch("calibration", chunks, num_workers)
            with closing(stream):  # PaddleSlim stops after the last batch; closing ends the decoding workers now
                for index, (images, _) in enumerate(stream):
                    fed[-1] = [index + 1, fed[-1][1] + len(images)]
                    progress.step(index + 1)
                    yield {fp32.feeds[0]: images}

        scope = paddle.static.Scope()  # fresh, so runs in one process never see each other's variables
        with paddle.static.scope_guard(scope):
            settings = dict(  # quant_post_static's, defaults included
                executor=paddle.static.Executor(paddle.CPUPlace()), model_dir=str(model_dir).rstrip("/"),
                data_loader=calibration_feed, model_filename=model_file, params_filename=params_file,
                batch_size=config.batch_size, batch_nums=batches, scope=scope, algo=config.algo, round_type="round",
                hist_percent=config.hist_percent, bias_correction=config.bias_correction,
                quantizable_op_type=["conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2"],
                is_full_quantize=False, weight_bits=8, activation_bits=8, activation_quantize_type="range_abs_max",
                weight_quantize_type=config.weight_quantize_type, onnx_format=True,
                skip_tensor_list=list(config.skip_tensors) or None, optimize_model=False, deploy_backend=None,
            )
            if config.algo in STATISTIC_ALGOS:
                quantizer = Calibration(statistics=statistics, histogram=config.calibration_histogram, passes=passes,
                                        **settings)
            else:
                quantizer = PostTrainingQuantization(**settings)
            try:
                quantizer.quantize()
                quantizer.save_quantized_model(str(out_dir), model_filename=MODEL_FILE, params_filename=PARAMS_FILE)
            finally:  # a batch of every sampled activation stays in the scope until cleared
                release_scope(scope)
        weights, rounding = _refined_weights(config, weight_bits, Path(model_dir) / Path(model_file).stem,
                                             Path(out_dir), data, rows, num_workers, adaround_lowering)
        int8 = load_program(Path(out_dir) / Path(MODEL_FILE).stem)
    counts = op_counts(int8.program)
    if not counts.get("quantize_linear") and not allow_float:
        raise QuantizationError(
            "PaddleSlim inserted no quantize_linear op: the model has no quantizable conv/matmul layers"
        )
    fed_batches, fed_samples = fed[-1] if fed else (0, 0)  # the last pass's (every pass feeds the same)
    timed = isinstance(quantizer, Calibration)
    if not fed and timed:  # every pass came from `statistics`: they were measured on its batches
        fed_batches = quantizer.statistics.batches
        fed_samples = min(fed_batches * config.batch_size, len(rows))
    log.info("quantize: %d quantize_linear ops inserted in %.1f s, calibrated on %d samples",
             counts.get("quantize_linear", 0), time.perf_counter() - started, fed_samples)
    return QuantizeResult(
        model_file=MODEL_FILE,
        params_file=PARAMS_FILE,
        metrics={
            "algo": config.algo,
            "recipe": {name: getattr(config, name) for name in
                       ("algo", "hist_percent", "bias_correction", "weight_quantize_type", "rounding")},
            "adaround": rounding,
            "weight_bits": weights["weight_bits"],
            "weights_rounded_from_fp32": weights["rounded_from_fp32"],
            "weights_left_as_paddleslim_rounded": weights["left"],
            "skip_tensors": list(config.skip_tensors),
            "calibration_batches": fed_batches,
            "calibration_samples": fed_samples,
            "calibration_forward_batches": quantizer.forward_batches if timed else None,
            "calibration_forward_s": round(quantizer.forward_s, 3) if timed else None,
            "calibration_statistics_s": round(quantizer.statistics_s, 3) if timed else None,
            "calibration_statistics_reused": statistics is not None,
            "calibration_histogram": config.calibration_histogram if timed else None,
            "calibration_sampling_passes": passes if timed else 1,
            "quantize_linear_ops": counts.get("quantize_linear", 0),
            "dequantize_linear_ops": counts.get("dequantize_linear", 0),
            "equalized_tensors": [e.record() for e in equalized],
            "fp32_ops": fp32_ops,
            "int8_ops": counts,
        },
        statistics=quantizer.statistics if timed else None,
    )


def _refined_weights(config: QuantizeConfig, weight_bits: int, fp32_prefix: Path, out_dir: Path, data: StoredData,
                     rows: np.ndarray, num_workers: int, lowering: Lowering | None) -> tuple[dict, dict | None]:
    """The saved INT8 program's weights put on the `weight_bits` grid from the FP32 program PaddleSlim calibrated,
    then AdaRound if `config.rounding` asks for it (on evenly spread calibration rows), saved in place. Returns
    both records (AdaRound's: None without it)."""
    prefix = out_dir / Path(MODEL_FILE).stem
    if weight_bits == 8 and config.rounding != "adaptive":
        return {"weight_bits": 8, "rounded_from_fp32": [], "left": {}}, None
    int8, fp32 = load_program(prefix), load_program(fp32_prefix)
    weights = round_weights_to_bits(int8, fp32, weight_bits)
    rounding = None
    if config.rounding == "adaptive":
        picked = rows[calibration_rows(len(rows), config.adaround_samples)]
        chunks = [picked[start: start + config.batch_size] for start in range(0, len(picked), config.batch_size)]
        with closing(data.fetch("calibration", chunks, num_workers)) as stream:
            images = [images for images, _ in stream]
        rounding = adaround(int8, fp32, images, iterations=config.adaround_iterations, weight_bits=weight_bits,
                            lowering=lowering)
    save(int8, str(prefix))
    return weights, rounding
