"""Quantize stage: PaddleSlim post-training INT8 quantization, calibrated on the held-out split."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle
from paddleslim.quant import quant_post_static

from quantgate.config import QuantizeConfig
from quantgate.errors import BadInput
from quantgate.stages.data.splits import load_splits
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE  # the INT8 model keeps the FP32 file names
from quantgate.stages.shared.errors import StageError
from quantgate.stages.shared.progress import Progress
from quantgate.stages.shared.static_graph import load_program, op_counts, static_mode

log = logging.getLogger(__name__)


class QuantizationError(StageError, BadInput):
    """PaddleSlim could not quantize the model with the given settings."""


@dataclass(frozen=True)
class QuantizeResult:
    model_file: str
    params_file: str
    metrics: dict


def calibration_batches(samples: int, config: QuantizeConfig) -> int:
    """How many calibration batches will run.

    Raises:
        QuantizationError: more batches were asked for than the calibration split holds.
    """
    available = math.ceil(samples / config.batch_size)
    if config.batch_nums is None:
        return available
    if config.batch_nums > available:
        raise QuantizationError(
            f"quantize.batch_nums={config.batch_nums} with quantize.batch_size={config.batch_size} needs "
            f"{config.batch_nums * config.batch_size} calibration samples, but the calibration split has {samples} "
            f"({available} batches); lower quantize.batch_nums or raise data.calibration_fraction"
        )
    return config.batch_nums


def quantize(
    config: QuantizeConfig, model_dir: Path, model_file: str, params_file: str, splits_path: Path, out_dir: Path
) -> QuantizeResult:
    """Run PaddleSlim `quant_post_static` on the exported FP32 model, calibrated on the calibration split.

    Raises:
        QuantizationError: the calibration split is too small for the requested batches.
    """
    images = load_splits(splits_path).x_calibration
    return quantize_with_images(config, model_dir, model_file, params_file, images, out_dir)


def quantize_with_images(
    config: QuantizeConfig, model_dir: Path, model_file: str, params_file: str, images: np.ndarray, out_dir: Path,
    allow_float: bool = False,
) -> QuantizeResult:
    """Run PaddleSlim `quant_post_static` (ONNX-style quantize_linear ops) calibrated on `images`.

    `allow_float`: accept a model with nothing quantized (the search skips every layer on purpose).

    Raises:
        QuantizationError: `images` is too small for the requested batches, or nothing was quantized.
    """
    batches = calibration_batches(len(images), config)
    started = time.perf_counter()
    log.info("quantize: PaddleSlim %s calibration on %d batches of %d samples", config.algo, batches, config.batch_size)

    with static_mode():
        fp32 = load_program(Path(model_dir) / Path(model_file).stem)

        passes = 0

        def calibration_feed():  # PaddleSlim iterates it once per calibration pass ('hist' and 'KL' make two)
            nonlocal passes
            passes += 1
            progress = Progress(log, f"quantize calibration pass {passes}, batch", batches, every_s=5.0)
            for index in range(batches):
                progress.step(index + 1)
                yield {fp32.feeds[0]: images[index * config.batch_size : (index + 1) * config.batch_size]}

        scope = paddle.static.Scope()  # fresh, so runs in one process never see each other's variables
        with paddle.static.scope_guard(scope):
            quant_post_static(
                executor=paddle.static.Executor(paddle.CPUPlace()),
                model_dir=str(model_dir),
                quantize_model_path=str(out_dir),
                data_loader=calibration_feed,
                model_filename=model_file,
                params_filename=params_file,
                save_model_filename=MODEL_FILE,
                save_params_filename=PARAMS_FILE,
                batch_size=config.batch_size,
                batch_nums=batches,
                scope=scope,
                algo=config.algo,
                hist_percent=config.hist_percent,
                bias_correction=config.bias_correction,
                weight_quantize_type=config.weight_quantize_type,
                skip_tensor_list=list(config.skip_tensors) or None,
                onnx_format=True,
            )
        int8 = load_program(Path(out_dir) / Path(MODEL_FILE).stem)
    counts = op_counts(int8.program)
    if not counts.get("quantize_linear") and not allow_float:
        raise QuantizationError(
            "PaddleSlim inserted no quantize_linear op: the model has no quantizable conv/matmul layers"
        )
    log.info("quantize: %d quantize_linear ops inserted in %.1f s", counts["quantize_linear"], time.perf_counter() - started)
    return QuantizeResult(
        model_file=MODEL_FILE,
        params_file=PARAMS_FILE,
        metrics={
            "algo": config.algo,
            "recipe": {name: getattr(config, name) for name in
                       ("algo", "hist_percent", "bias_correction", "weight_quantize_type")},
            "skip_tensors": list(config.skip_tensors),
            "calibration_batches": batches,
            "calibration_samples": min(len(images), batches * config.batch_size),
            "quantize_linear_ops": counts.get("quantize_linear", 0),
            "dequantize_linear_ops": counts.get("dequantize_linear", 0),
            "fp32_ops": op_counts(fp32.program),
            "int8_ops": counts,
        },
    )
