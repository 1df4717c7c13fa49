"""What calibrating a Paddle inference program holds per sample: from its shapes, or measured in a child process.

PaddleSlim's calibration makes every activation it samples persistable (`_set_activation_persistable`: the
inputs and outputs of the layers it quantizes and the outputs of nearly every other op, for their output
scales), so a batch's activations stay in the scope at once: PP-OCRv4's detector at 960x960 held 13.3 GB
calibrating 12 pages in one batch. The sum of every activation of the program at one sample (Paddle's own shape
inference, op by op: `activation_bytes`) is then the unit of `calibration_cost`. Measured on that detector
(quantize stage, hist, one pass, this machine), calibration grew by 1.03-1.08 times that sum per page at 640x640
and 960x960, on top of 0.37-0.59 times it held whatever the batch (the executor's and oneDNN's working memory,
the images being fed): CALIBRATION_PER_SAMPLE and CALIBRATION_WORKING round both up. Where shape inference
cannot tell a size (a reshape computed from the data, as in PP-OCRv4's recognizer), `probe_calibration`
measures instead: `python -m quantgate.int8.program_memory` runs the program with every activation persistable.
A plain forward run holds far less (PP-OCRv4's detector at 960x960: 0.6 GB beside a 1.3 GB sum of activations,
the executor freeing each after its last use); where that sum does not fit, `probe_forward` measures the run.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import paddle
from paddle.base.data_feeder import convert_dtype

from quantgate.int8.static_graph import LoadedProgram, load_program, static_mode
from quantgate.memory import MemoryBudget, choose_batch_in_passes, memory_budget, tree_memory_bytes
from quantgate.memory.probe import PROBE_BATCHES, Probe, ProbeFailed, probe, probe_one, run_probe

PLUMBING = ("feed", "fetch")
CALIBRATION_PER_SAMPLE = 1.1  # x every activation of a sample: the activations kept, and what measuring them copies
CALIBRATION_WORKING = 0.6  # x every activation of a sample, held whatever the batch: executor and oneDNN scratch
CALIBRATION_MAX_PASSES = 4  # a sample's kept activations split over at most this many passes over the data


@dataclass(frozen=True)
class ProgramMemory:
    activation_bytes: int  # every activation of one sample, summed: a bound on what a batch adds per sample
    parameter_bytes: int
    unknown_shapes: int  # activations whose size shape inference could not tell (not counted)
    activations: int = 0  # how many activations the program has (what calibration may keep statistics of)


@lru_cache(maxsize=8)
def activation_bytes(prefix: Path, input_shape: tuple[int, ...]) -> ProgramMemory:
    """The program at `prefix` with one sample of `input_shape` (CHW): its activations' and parameters' bytes."""
    with static_mode():
        loaded = load_program(prefix)
        block = loaded.program.global_block()
        block.var(loaded.feeds[0]).desc.set_shape([1, *input_shape])
        failed = 0
        for op in block.ops:
            if op.type not in PLUMBING:
                try:
                    op.desc.infer_shape(block.desc)
                except (ValueError, RuntimeError):  # e.g. an rnn whose initial state keeps the batch as -1
                    failed += 1
        activations, parameters, unknown, count = 0, 0, failed, 0
        for var in block.vars.values():
            if var.name in PLUMBING or var.type != paddle.base.core.VarDesc.VarType.DENSE_TENSOR:
                continue
            if 0 in var.shape:  # reshape's and flatten's XShape: a shape record, no data
                continue
            count += not var.persistable
            if any(size < 0 for size in var.shape):
                unknown += not var.persistable
                continue
            size = int(np.prod(var.shape, dtype=np.int64)) * np.dtype(convert_dtype(var.dtype)).itemsize
            if var.persistable:
                parameters += size
            else:
                activations += size
    return ProgramMemory(activations, parameters, unknown, count)


@dataclass(frozen=True)
class CalibrationCost:
    fixed_bytes: int  # what calibrating holds whatever the batch, beyond the process as it was before
    per_sample_bytes: int
    measured_by: str
    kept_bytes: int  # of per_sample_bytes, the activations kept: passes over the data can each keep a share


def _from_shapes(program: ProgramMemory, sample_in: int, statistics: int = 0) -> CalibrationCost:
    """Calibration's cost as the shapes tell it (the module docstring says how the factors were measured), with
    `statistics` bytes held whatever the batch."""
    kept = int(CALIBRATION_PER_SAMPLE * program.activation_bytes)
    return CalibrationCost(2 * program.parameter_bytes + int(CALIBRATION_WORKING * program.activation_bytes)
                           + statistics, kept + sample_in, "shapes", kept)


def calibration_cost(prefix: Path, input_shape: tuple[int, ...], statistics_per_tensor: int = 0) -> CalibrationCost:
    """What calibrating the program at `prefix` on samples of `input_shape` costs: from the shapes where every size
    is known, else measured (`probe_calibration`). The parameters count twice: the FP32 program and PaddleSlim's
    copy of it; `statistics_per_tensor` bytes are held for each activation while it is measured (a histogram of
    fixed bins), whatever the batch.

    Raises:
        ProbeFailed: the measuring process failed.
    """
    shape = tuple(input_shape)
    program = activation_bytes(Path(prefix), shape)
    sample_in = int(np.prod(shape, dtype=np.int64)) * 4
    statistics = statistics_per_tensor * program.activations
    if not program.unknown_shapes:
        return _from_shapes(program, sample_in, statistics)
    probe = probe_calibration(Path(prefix), shape)
    kept = int(CALIBRATION_PER_SAMPLE * probe.per_sample_bytes)
    return CalibrationCost(2 * program.parameter_bytes + probe.fixed_bytes + statistics, kept + sample_in,
                           probe.measured_by, kept)


@lru_cache(maxsize=8)
def probe_calibration(prefix: Path, input_shape: tuple[int, ...]) -> Probe:
    """What calibrating the program at `prefix` holds, measured at PROBE_BATCHES in a fresh process.

    Raises:
        ProbeFailed: the process failed.
    """
    return probe(__name__, ["--prefix", str(prefix), "--shape", *map(str, input_shape)], PROBE_BATCHES)


def calibration_bytes_at_one(prefix: Path, input_shape: tuple[int, ...]) -> int:
    """What calibrating the program at `prefix` on one sample holds beyond the interpreter, measured in a fresh
    process (before a run, where the shapes' bound does not fit: nothing larger than one sample is tried).

    Raises:
        ProbeFailed: the process failed (`.killed`: a signal ended it, e.g. the OOM killer).
    """
    mark, interpreter = probe_one(__name__, ["--prefix", str(prefix), "--shape", *map(str, input_shape)], 1)
    return max(0, mark - interpreter)


def check_one_sample_fits(prefix: Path, input_shape: tuple[int, ...], budget: MemoryBudget | None = None,
                          max_passes: int = CALIBRATION_MAX_PASSES) -> None:
    """Refuse a model whose calibration cannot hold even one sample of `input_shape` (of every loop, the one that
    holds the most per sample: every activation at once) in `max_passes` passes over the data, each keeping a share
    of the activations, before anything runs it. It costs what the quantize stage will estimate
    (`calibration_cost`); where shape inference cannot tell every size, one sample is measured in a child process
    instead (which the kernel may kill: that is an answer too).

    Raises:
        MemoryRefused: one sample does not fit the budget, naming the bytes, the budget and the settings.
    """
    budget, shape = budget or memory_budget(), tuple(input_shape)
    program = activation_bytes(Path(prefix), shape)
    held, sample_in = tree_memory_bytes(), int(np.prod(shape, dtype=np.int64)) * 4
    cost = _from_shapes(program, sample_in)  # the quantize stage's own estimate
    fixed, one, kept, measured_by = cost.fixed_bytes, cost.per_sample_bytes, cost.kept_bytes, cost.measured_by
    if program.unknown_shapes and held < budget.bytes:  # measure only what the shapes cannot tell
        try:  # one sample only: nothing larger than what is being checked is tried
            kept = calibration_bytes_at_one(Path(prefix), shape)
            fixed, one, measured_by = 0, kept + sample_in, "measured in a child process"
        except ProbeFailed as exc:
            if not exc.killed:  # the program cannot run this sample at all: the model's own checks say why
                return
            measured_by = "shapes (measuring one sample was killed)"
    choose_batch_in_passes("calibration", fixed_bytes=held + fixed, per_sample_bytes=one, split_bytes=kept,
                           max_passes=max_passes, budget=budget, requested=None, ceiling=1,
                           setting="quantize.batch_size", measured_by=measured_by,
                           subject=f"{Path(prefix).parent.name}/{Path(prefix).name}.pdmodel on inputs of "
                                   f"{'x'.join(map(str, shape))}")


@lru_cache(maxsize=8)
def probe_forward(prefix: Path, input_shape: tuple[int, ...]) -> Probe:
    """What running the program at `prefix` for its outputs holds (the executor frees each activation after its
    last use), measured at PROBE_BATCHES in a fresh process.

    Raises:
        ProbeFailed: the process failed.
    """
    return probe(__name__, ["--prefix", str(prefix), "--shape", *map(str, input_shape), "--outputs-only"],
                 PROBE_BATCHES)


def _calibration_probe(prefix: Path, shape: tuple[int, ...], batch: int, keep_activations: bool = True) -> None:
    def load() -> LoadedProgram:
        loaded = load_program(prefix)
        for var in loaded.program.list_vars():  # what calibration keeps: every activation it samples (nearly all)
            if keep_activations and not var.persistable and var.name not in PLUMBING:
                var.persistable = True
        return loaded

    def run_at(loaded: LoadedProgram, batch: int) -> None:
        images = np.random.default_rng(0).standard_normal((batch, *shape), dtype=np.float32)
        with paddle.static.scope_guard(loaded.scope):
            loaded.executor.run(loaded.program, feed={loaded.feeds[0]: images}, fetch_list=loaded.fetches,
                                scope=loaded.scope)

    with static_mode():
        run_probe(load, run_at, batch)


if __name__ == "__main__":  # importing quantgate first set FLAGS_enable_pir_api: the legacy format, as quantize reads it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, required=True)
    parser.add_argument("--shape", type=int, nargs="+", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--outputs-only", action="store_true", help="keep no activation: a plain forward run")
    arguments = parser.parse_args()
    _calibration_probe(arguments.prefix, tuple(arguments.shape), arguments.batch, not arguments.outputs_only)
