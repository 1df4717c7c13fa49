"""Adaptive rounding of PaddleSlim's INT8 weights (AdaRound, Nagel et al. 2020), layer by layer.

PaddleSlim rounds each weight to the nearest point of its grid. AdaRound keeps the grid (the scale PaddleSlim
chose) and decides, per weight, whether to round down or up, so that the layer's output on calibration data
is as close to FP32 as it can be: a soft rounding h(V) in [0, 1] is learned with Adam, pulled to 0 or 1 by
an annealed regularizer, then made hard. PaddleSlim's own AdaRound (`round_type='adaround'`) and its
reconstruction quantization (`quant_recon_static`) build their training ops with the dynamic-graph API and
fail in Paddle 3.3.1 on the legacy program format PaddleSlim needs; this runs the same optimization on tensors
fetched from the static programs.

Each layer (conv2d, depthwise_conv2d, matmul_v2 with a quantized weight) is fitted asymmetrically, as BRECQ
and QDrop do: its input is what the INT8 program feeds it (quantized, with every error upstream and the layers
before it already refitted, so a layer also makes up for what those left), its target the FP32 program's output
of the same layer. The FP32 inputs of every layer are fetched in one pass (PP-OCRv4 rec: 22 MB per line), the
INT8 ones layer by layer, each carried on from the previous layer's (only the ops between them run). The error
of a conv followed by a BatchNorm is weighted by the BatchNorm's per-channel gain, so it is measured where the
next layer sees it.

The fit runs on FIT_POSITIONS output positions (a sample's pixel or row) drawn once over every sample, the layer a
matrix product of their unfolded inputs (`unfolded`): the loss per position is the same as over whole samples.
Over fixed positions that loss is a quadratic in the weight, so each step takes it over all of them from their
Gram matrix (`adaround_steps`, numpy, the gradient written out); a patch over QUADRATIC_PATCH draws
STEP_POSITIONS a step instead, and a layer `unfolded` cannot take keeps Paddle's dynamic graph over whole samples.
PP-OCRv4 rec's 45 layers: 1,467 s before, 231 s now (docs/benchmarks.md, "Recovery's time"). A layer keeps the
new rounding only if its output error on the calibration data is lower than with nearest rounding; only the
integer codes change, never a scale, so every runtime reads the same grids.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import paddle
import paddle.nn.functional as F

from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.static_graph import LoadedProgram
from quantgate.progress import Progress
from quantgate.stages.quantize import adaround_steps, unfolded
from quantgate.stages.quantize.deployed_inputs import FROM_DEPLOYED, FROM_PROGRAM, DeployedInputs
from quantgate.stages.quantize.quantized_weights import (
    Layer,
    array,
    code_range,
    grid_factor,
    is_nearest,
    quantized_layers,
    weight_arrays,
)

log = logging.getLogger(__name__)

ZETA, GAMMA = 1.1, -0.1  # the rectified sigmoid's stretch (AdaRound's defaults)
REGULARIZATION = 0.01  # weight of the rounding regularizer against the reconstruction error (BRECQ's)
BETA = (20.0, 2.0)  # the regularizer's exponent, annealed from the first to the second
WARMUP = 0.2  # share of the iterations fitted without the regularizer
FIT_POSITIONS = 16384  # output positions (a sample's pixel or row) a layer is fitted on, drawn over every sample
STEP_POSITIONS = 1024  # of them, drawn afresh for each step where the patch is larger than QUADRATIC_PATCH
QUADRATIC_PATCH = 2 * STEP_POSITIONS  # up to this patch a step is cheaper as a quadratic over every position


@contextmanager
def dynamic_mode():
    was_static = not paddle.in_dynamic_mode()
    paddle.disable_static()
    try:
        yield
    finally:
        if was_static:
            paddle.enable_static()


def _apply(layer: Layer, x: paddle.Tensor, w: paddle.Tensor) -> paddle.Tensor:
    if layer.op_type == "matmul_v2":
        return paddle.matmul(x, w, transpose_x=layer.attrs["trans_x"], transpose_y=layer.attrs["trans_y"])
    if layer.attrs.get("padding_algorithm", "EXPLICIT") != "EXPLICIT":
        padding = layer.attrs["padding_algorithm"]
    else:
        padding = layer.attrs["paddings"]
    return F.conv2d(x, w, stride=layer.attrs["strides"], padding=padding, dilation=layer.attrs["dilations"],
                    groups=layer.attrs["groups"], data_format=layer.attrs.get("data_format", "NCHW"))


def _channel_axis(layer: Layer) -> int:
    return -1 if layer.op_type == "matmul_v2" else 1


def _error(layer: Layer, output: paddle.Tensor, target: paddle.Tensor, gain: paddle.Tensor | None) -> paddle.Tensor:
    """BRECQ's reconstruction loss: the squared error summed over channels, averaged over the rest."""
    squared = (output - target) ** 2
    if gain is not None:
        squared = squared * gain
    return squared.sum(axis=_channel_axis(layer)).mean()


@dataclass(frozen=True)
class Refit:
    codes: np.ndarray
    error_nearest: float
    error_adaptive: float
    changed: int

    def record(self) -> dict:
        return {"error_nearest": self.error_nearest, "error_adaptive": self.error_adaptive,
                "codes_changed": self.changed, "kept": self.error_adaptive < self.error_nearest}


def refit_layer(layer: Layer, weight: np.ndarray, step: np.ndarray, inputs: np.ndarray, fp32_inputs: np.ndarray,
                gain: np.ndarray | None, iterations: int, batch: int, rng: np.random.Generator,
                factor: int = 1) -> Refit:
    """AdaRound for one layer: the codes whose output on `inputs` (what the INT8 program feeds it) is closest to
    FP32's output on `fp32_inputs` (what the FP32 program feeds it)."""
    low, high = code_range(layer, factor)
    step = step * factor  # the grid the codes are fitted on: 8-bit, or every other 8-bit point (7-bit weights)
    scaled = weight / step
    floor = np.floor(scaled)
    nearest = np.clip(np.round(scaled), low, high)
    rest = np.clip(scaled - floor, 0.01, 0.99)
    with dynamic_mode():
        w_fp32, t_step, t_floor = (paddle.to_tensor(a.astype(np.float32)) for a in (weight, step, floor))
        t_gain = None if gain is None else paddle.to_tensor(gain.astype(np.float32))
        targets = []
        with paddle.no_grad():
            for start in range(0, len(fp32_inputs), batch):
                targets.append(_apply(layer, paddle.to_tensor(fp32_inputs[start:start + batch]), w_fp32))
        target = paddle.concat(targets)
        x_all = paddle.to_tensor(inputs)

        def total_error(codes: np.ndarray) -> float:
            w = paddle.to_tensor((codes * step).astype(np.float32))
            with paddle.no_grad():
                return float(sum(_error(layer, _apply(layer, x_all[s:s + batch], w), target[s:s + batch], t_gain)
                                 * len(x_all[s:s + batch]) for s in range(0, len(x_all), batch)) / len(x_all))

        start = (-np.log((ZETA - GAMMA) / (rest - GAMMA) - 1)).astype(np.float32)
        if unfolded.supported(layer):
            logits = _fit_positions(layer, inputs, fp32_inputs, weight, w_fp32, step, floor, start, (low, high), gain,
                                    iterations, rng)
        else:
            logits = _fit_samples(layer, x_all, target, t_gain, t_floor, t_step, start, (low, high), iterations,
                                  batch, rng)
        adaptive = np.clip(floor + (logits >= 0), low, high)
        return Refit(adaptive.astype(np.float32), total_error(nearest), total_error(adaptive),
                     int(np.count_nonzero(adaptive != nearest)))


def _annealed(iteration: int, iterations: int) -> float | None:
    """The regularizer's exponent at `iteration`: None during the warm-up, then from BETA[0] down to BETA[1]."""
    warmup = int(WARMUP * iterations)
    if iteration < warmup:
        return None
    return BETA[1] + (BETA[0] - BETA[1]) * (1 - (iteration - warmup) / max(1, iterations - warmup))


def _fit_samples(layer: Layer, x_all: paddle.Tensor, target: paddle.Tensor, gain: paddle.Tensor | None,
                 floor: paddle.Tensor, grid: paddle.Tensor, start: np.ndarray, bounds: tuple[int, int],
                 iterations: int, batch: int, rng: np.random.Generator) -> np.ndarray:
    """AdaRound's steps in Paddle's dynamic graph, each on `batch` whole samples (layers `unfolded` cannot take)."""
    v = paddle.create_parameter(start.shape, "float32", default_initializer=paddle.nn.initializer.Assign(start))
    optimizer = paddle.optimizer.Adam(learning_rate=1e-3, parameters=[v])
    for iteration in range(iterations):
        soft = paddle.clip(F.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)
        rows = paddle.to_tensor(rng.choice(len(x_all), size=min(batch, len(x_all)), replace=False))
        output = _apply(layer, paddle.gather(x_all, rows), paddle.clip(floor + soft, *bounds) * grid)
        loss = _error(layer, output, paddle.gather(target, rows), gain)
        if (beta := _annealed(iteration, iterations)) is not None:
            loss = loss + REGULARIZATION * (1 - paddle.abs(2 * soft - 1) ** beta).sum()
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    return v.numpy()


def _fit_positions(layer: Layer, inputs: np.ndarray, fp32_inputs: np.ndarray, weight: np.ndarray,
                   w_fp32: paddle.Tensor, grid: np.ndarray, floor: np.ndarray, start: np.ndarray,
                   bounds: tuple[int, int], gain: np.ndarray | None, iterations: int,
                   rng: np.random.Generator) -> np.ndarray:
    """AdaRound's steps in numpy (`adaround_steps`) on FIT_POSITIONS output positions drawn once over every sample
    (`unfolded`): the same loss per position as over whole samples. Each step takes the error over all of them as
    a quadratic in the weight (a patch-by-patch Gram matrix per group), or, for patches over QUADRATIC_PATCH, over
    STEP_POSITIONS of them drawn afresh."""
    total = unfolded.positions(layer, inputs, weight.shape)
    picked = np.sort(rng.choice(total, size=min(FIT_POSITIONS, total), replace=False))
    with paddle.no_grad():
        rows = unfolded.rows(layer, inputs, picked, weight.shape).numpy()
        target = unfolded.product(layer, unfolded.rows(layer, fp32_inputs, picked, weight.shape), w_fp32).numpy()
    conv = layer.op_type != "matmul_v2"
    grouping = adaround_steps.Grouping(tuple(weight.shape), (layer.attrs["groups"] or 1) if conv else 1,
                                       not conv and layer.attrs.get("trans_y", False), conv)
    rows, target = grouping.grouped_rows(rows), grouping.grouped_outputs(target)
    channel_gain = None if gain is None else grouping.grouped_outputs(gain.reshape(1, -1).astype(np.float32))
    floor_m, grid_m = grouping.to_matrices(floor), grouping.to_matrices(grid)
    state = adaround_steps.SoftRounding.start(grouping.to_matrices(start))
    settings = (floor_m, grid_m, *bounds, channel_gain, REGULARIZATION)
    if rows.shape[2] <= QUADRATIC_PATCH:  # every position at every step, for less than drawing them
        quadratic = adaround_steps.Quadratic.of(rows, target)
        for iteration in range(iterations):
            adaround_steps.quadratic_step(state, quadratic, *settings, _annealed(iteration, iterations), ZETA, GAMMA)
        return grouping.from_matrices(state.v)
    for iteration in range(iterations):
        drawn = rng.choice(len(picked), size=min(STEP_POSITIONS, len(picked)), replace=False)
        adaround_steps.step(state, rows[drawn], target[drawn], *settings, _annealed(iteration, iterations), ZETA,
                            GAMMA)
    return grouping.from_matrices(state.v)


def _fetch(program: LoadedProgram, images: list[np.ndarray], names: list[str],
           carried: tuple[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """`names` on every batch of `images`, running only the ops that compute them.

    `carried`: a tensor of the program already computed on every image (name, values): fed beside the images, so
    that only the ops between it and `names` run (and any other path to them from the images)."""
    block = program.program.global_block()
    fetched: list[list[np.ndarray]] = [[] for _ in names]
    if carried is None:
        pruned, sizes = program.program._prune([block.var(name) for name in names]), None
    else:
        pruned, sizes = program.program, np.cumsum([0, *map(len, images)])
    with paddle.static.scope_guard(program.scope):
        for index, batch in enumerate(images):
            feed = {program.feeds[0]: batch}
            if carried is not None:
                feed[carried[0]] = carried[1][sizes[index]:sizes[index + 1]]
            outputs = program.executor.run(pruned, feed=feed, fetch_list=names, use_prune=carried is not None)
            for found, output in zip(fetched, outputs):
                found.append(np.asarray(output))
    return [np.concatenate(found) for found in fetched]


def adaround(int8: LoadedProgram, fp32: LoadedProgram, images: list[np.ndarray], iterations: int = 500,
             batch: int = 8, seed: int = 0, weight_bits: int = 8, lowering: Lowering | None = None) -> dict:
    """Refit the rounding of every qualifying layer of `int8` (static mode on; its scope is updated in place).

    `images`: calibration batches. `weight_bits`: 7 fits the non-depthwise weights on every other point of the
    8-bit grid, where `quantized_weights.round_weights_to_bits` put them (the codes stay even). `lowering`: each
    layer's input is taken from `int8` lowered so (`deployed_inputs`: the graph that runs), where the layer is
    found there; None: from `int8` itself. Returns the record: per layer the output errors with nearest and
    adaptive rounding, the codes changed and where its input came from, the layers left as they were and why,
    and the time taken.
    """
    started = time.perf_counter()
    layers, skipped = quantized_layers(int8, fp32)
    deployed = None if lowering is None else DeployedInputs.lowered(int8, lowering, save)
    rng = np.random.default_rng(seed)
    names = list(dict.fromkeys(layer.fp32_input for layer in layers))
    found = dict(zip(names, _fetch(fp32, images, names)))
    records, carried = {}, None
    progress = Progress(log, "quantize adaround, layer", len(layers), every_s=10.0)
    for index, layer in enumerate(layers):
        codes, weight, step = weight_arrays(int8, fp32, layer)
        factor = grid_factor(layer, weight_bits)
        if not is_nearest(codes, weight, step, layer, factor):
            skipped[layer.codes] = f"its INT8 weight is not the nearest {8 if factor == 1 else 7}-bit rounding " \
                                   "of the FP32 weight"
            continue
        # with every layer before it refitted: in the lowered model, or in the program from the previous layer's
        # input on, where that is upstream of it
        source = FROM_DEPLOYED if deployed is not None and deployed.find(layer, codes) else FROM_PROGRAM
        if source == FROM_DEPLOYED:
            inputs, carried = deployed.inputs(layer, images), None
        elif carried is not None and carried[0] == layer.int8_input:
            inputs = carried[1]
        else:
            (inputs,) = _fetch(int8, images, [layer.int8_input], carried)
        if source == FROM_PROGRAM:
            carried = (layer.int8_input, inputs)
        gain = None
        if layer.batch_norm is not None:
            scale, variance, epsilon = layer.batch_norm
            gain = (array(fp32, scale) ** 2 / (array(fp32, variance) + epsilon)).reshape(1, -1, 1, 1)
        refit = refit_layer(layer, weight, step, inputs, found[layer.fp32_input], gain, iterations, batch, rng,
                            factor)
        records[layer.codes] = {"op": layer.op_type, "weight_bits": 8 if factor == 1 else 7, "input_from": source,
                                **refit.record()}
        if refit.error_adaptive < refit.error_nearest:
            new = (refit.codes * factor).astype(codes.dtype)
            int8.scope.find_var(layer.codes).get_tensor().set(new, paddle.CPUPlace())
            if source == FROM_DEPLOYED:
                deployed.update(layer, new)
        progress.step(index + 1)
    kept = sum(record["kept"] for record in records.values())
    deployed_layers = sum(record["input_from"] == FROM_DEPLOYED for record in records.values())
    log.info("quantize: adaptive rounding kept for %d of %d layers in %.1f s (inputs from the %s for %d of them)",
             kept, len(records), time.perf_counter() - started, FROM_DEPLOYED, deployed_layers)
    return {"layers": records, "skipped": skipped, "seconds": round(time.perf_counter() - started, 1),
            "iterations": iterations, "batch": batch, "samples": int(sum(len(b) for b in images)),
            "lowering": None if lowering is None else lowering.options(), "inputs_from_lowered_model": deployed_layers}


def save(program: LoadedProgram, prefix: str) -> None:
    """Write `program` with its scope's (refitted) parameters back as `<prefix>.pdmodel/.pdiparams`."""
    block = program.program.global_block()
    with paddle.static.scope_guard(program.scope):
        paddle.static.save_inference_model(prefix, [block.var(name) for name in program.feeds], program.fetches,
                                           executor=program.executor, program=program.program, clip_extra=False)
