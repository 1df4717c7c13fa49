"""The batch a runtime loop runs at: every runner it holds open, sized together against the memory budget.

A loop that holds several runners (the evaluate stage's accuracy pass: FP32 and INT8 in every runtime; the search's
validation: both in onnxruntime) grows each of them by the batch. The first estimate is from shapes: every
activation of the ONNX graph at one sample, summed (onnx's shape inference), per runner; a runtime plans its
buffers and reuses them, so this bounds what it holds from above. When that bound would lower the batch, each
runner is probed instead: `python -m quantgate.runtimes.memory_fit` opens it as the loop does and runs one batch,
in a fresh process per batch size (`quantgate.memory.probe`).
"""

from __future__ import annotations

import argparse
import json
import logging
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import shape_inference

from quantgate.memory import BatchChoice, MemoryBudget, choose_batch, memory_budget, tree_memory_bytes
from quantgate.memory.probe import PROBE_BATCHES, Probe, ProbeFailed, probe, run_probe
from quantgate.runtimes.forms import ModelForm, open_runner

log = logging.getLogger(__name__)

UNKNOWN = 1 << 62  # a bound no budget holds: the loop measures instead
RUNNER_CEILING = 64  # the largest batch chosen without a setting: beyond it a CPU runtime gains no speed, only memory
ONNX_BYTES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.INT8: 1,
              onnx.TensorProto.UINT8: 1, onnx.TensorProto.INT32: 4, onnx.TensorProto.INT64: 8,
              onnx.TensorProto.BOOL: 1, onnx.TensorProto.DOUBLE: 8}


@lru_cache(maxsize=16)
def onnx_activation_bytes(path: Path, input_shape: tuple[int, ...]) -> int:
    """Every activation of the ONNX model at `path` for one sample of `input_shape`, summed (unknown sizes left out)."""
    model = onnx.load(str(path), load_external_data=False)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, size in zip(dims, (1, *input_shape)):
        dim.ClearField("dim_param")
        dim.dim_value = size
    inferred = shape_inference.infer_shapes(model)
    total = 0
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        tensor = value.type.tensor_type
        sizes = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor.shape.dim]
        if sizes and min(sizes) > 0:
            total += int(np.prod(sizes, dtype=np.int64)) * ONNX_BYTES.get(tensor.elem_type, 4)
    return total


def _bounds(runners: dict[tuple[str, str], ModelForm], input_shape: tuple[int, ...]) -> list[int]:
    """Each runner's bound per sample. A Paddle program (a folder) is the network its ONNX twins are: it takes
    their largest bound (with no ONNX runner beside it, no bound: the loop probes)."""
    onnx_bounds = [onnx_activation_bytes(form.path, input_shape) for form in runners.values() if not form.path.is_dir()]
    return [max(onnx_bounds, default=UNKNOWN) if form.path.is_dir() else onnx_activation_bytes(form.path, input_shape)
            for form in runners.values()]


@lru_cache(maxsize=32)
def probe_runner(runtime: str, form: ModelForm, threads: int, input_shape: tuple[int, ...]) -> Probe:
    """What `form` open in `runtime` holds, and what a sample adds, measured at PROBE_BATCHES in fresh processes.

    Raises:
        ProbeFailed: a probing process failed.
    """
    arguments = ["--runtime", runtime, "--form", json.dumps([str(form.path), form.int8, form.description, form.stage]),
                 "--threads", str(threads), "--shape", *map(str, input_shape)]
    return probe(__name__, arguments, PROBE_BATCHES)


def runners_batch(loop: str, runners: dict[tuple[str, str], ModelForm], input_shape: tuple[int, ...], threads: int,
                  *, requested: int | None, ceiling: int, setting: str, subject: str,
                  budget: MemoryBudget | None = None, own_process: bool = False) -> BatchChoice:
    """The batch for a loop holding every runner of `runners` open at once, fed samples of `input_shape`, beside
    what this process's tree holds now.

    `own_process`: the loop runs in a new process of its own (latency), whose interpreter counts too.

    Raises:
        MemoryRefused: even one sample does not fit (the message names the budget's settings).
        ProbeFailed: a probing process failed.
    """
    budget = budget or memory_budget()
    held = tree_memory_bytes()
    sample_in = int(np.prod(input_shape, dtype=np.int64)) * 4  # the decoded batch this process holds
    bounds = _bounds(runners, tuple(input_shape))
    bound = sample_in + sum(bounds)
    target = requested or ceiling
    if held + target * bound <= budget.bytes:  # the bound fits: no need to measure
        return choose_batch(loop, fixed_bytes=held, per_sample_bytes=bound, budget=budget, requested=requested,
                            ceiling=ceiling, setting=setting, subject=subject, measured_by="shapes")
    try:
        probes = [probe_runner(runtime, form, threads, tuple(input_shape)) for (runtime, _), form in runners.items()]
    except ProbeFailed as exc:
        if exc.killed:
            raise
        # A model its runtime cannot run (an op it lacks) fails the same way in the loop, which names the op: size
        # the loop by the shapes where they tell, and let it fail there.
        log.warning("%s: a model could not be run to measure its memory; sized by its shapes where they tell (%s)",
                    loop, str(exc).splitlines()[0])
        known = [size for size in bounds if size < UNKNOWN]
        return choose_batch(loop, fixed_bytes=held, per_sample_bytes=sample_in + sum(known), budget=budget,
                            requested=requested, ceiling=ceiling, setting=setting, subject=subject,
                            measured_by="shapes where known (a model could not be run to measure it)")
    interpreter = max(p.interpreter_bytes for p in probes) if own_process else 0
    return choose_batch(loop, fixed_bytes=held + interpreter + sum(p.fixed_bytes for p in probes),
                        per_sample_bytes=sample_in + sum(p.per_sample_bytes for p in probes), budget=budget,
                        requested=requested, ceiling=ceiling, setting=setting, subject=subject,
                        measured_by=f"{len(probes)} runner(s) {probes[0].measured_by}",
                        changes="make one sample smaller (data.transforms) or list fewer evaluate.runtimes")


def _runner_probe(runtime: str, form: ModelForm, threads: int, shape: tuple[int, ...], batch: int) -> None:
    def run_at(runner, size: int) -> None:
        runner(np.zeros((size, *shape), np.float32))

    run_probe(lambda: open_runner(runtime, form, threads, (batch, *shape)), run_at, batch)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", required=True)
    parser.add_argument("--form", required=True, help="JSON [path, int8, description, stage]")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--shape", type=int, nargs="+", required=True)
    parser.add_argument("--batch", type=int, required=True)
    arguments = parser.parse_args()
    path, int8, description, stage = json.loads(arguments.form)
    _runner_probe(arguments.runtime, ModelForm(Path(path), int8, description, stage), arguments.threads,
                  tuple(arguments.shape), arguments.batch)
