"""What the evaluate stage's latency loops will hold for a Paddle program, asked before a run of it starts.

The evaluate stage times each runtime's FP32 and INT8 models in a fresh process at evaluate.latency_batch_size
whatever the budget, and refuses a batch that does not fit (`quantgate.memory.latency`). For a model trained
elsewhere the shapes that decide this are known before the first stage, so the same question is asked of the
program itself, and a batch the stage would refuse after every stage before it is refused in seconds.

The estimate errs low, so that what it refuses the stage would refuse too:
- a runner holds at most every activation of a sample at once (the program's shapes, `activation_bytes`; then
  the ONNX graph's, as the stage asks first): where every runner of a runtime at that bound fits, nothing is
  measured;
- else the FP32 model is opened as the stage will open it (paddle2onnx, as the convert stage converts it; the
  program itself for paddle_inference) and measured at two batches in fresh processes, by the evaluate stage's own
  probe (`quantgate.runtimes.memory_fit.probe_runner`);
- the INT8 models do not exist yet (`model_forms` says how many each runtime times: onnxruntime also times
  paddle2onnx's own): each counts INT8_SHARE of what FP32 adds per sample, and nothing it holds whatever the
  batch. On PP-OCRv4's detector (640x640 and 960x960 pages) they added 0.49-0.83 of FP32's per page in
  onnxruntime and OpenVINO.
The FP32 program's own forward run (`probe_forward`) is no lower bound for a runtime: OpenVINO held 0.058 GB a
640x640 page where Paddle's executor held 0.11 GB.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from quantgate.int8.errors import ConversionError
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.program_memory import activation_bytes
from quantgate.memory import (
    LATENCY_SETTING,
    MemoryBudget,
    choose_batch,
    latency_batch_kept,
    latency_loop,
    memory_budget,
    tree_memory_bytes,
)
from quantgate.memory.probe import ProbeFailed
from quantgate.runtimes.forms import ModelForm, model_forms
from quantgate.runtimes.memory_fit import onnx_activation_bytes, probe_runner
from quantgate.stages.evaluate.outputs import PADDLE_INFERENCE
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE

log = logging.getLogger(__name__)

INT8_SHARE = 0.25  # of FP32's per-sample bytes: each activation at least a byte where FP32's is four


def check_latency_batch_fits(prefix: Path, input_shape: tuple[int, ...], runtimes: tuple[str, ...], batch: int,
                             threads: int, budget: MemoryBudget | None = None) -> None:
    """Refuse, before anything runs, a latency batch the evaluate stage would refuse for the program at `prefix`
    on samples of `input_shape` in one of `runtimes` (see the module docstring for the estimate). A model that
    cannot be converted or opened is not judged here: its stage says why.

    Raises:
        MemoryRefused: with the evaluate stage's own message, naming the batch, the budget and both fixes.
    """
    budget, shape, prefix = budget or memory_budget(), tuple(input_shape), Path(prefix)
    program = activation_bytes(prefix, shape)
    held, sample_in = tree_memory_bytes(), int(np.prod(shape, dtype=np.int64)) * 4
    timed = max(len(named) for named in model_forms(runtimes, *[prefix] * 5).values())  # models a runtime times
    bound = held + timed * (program.parameter_bytes + batch * program.activation_bytes) + batch * sample_in
    if not program.unknown_shapes and bound <= budget.bytes:
        return
    with tempfile.TemporaryDirectory(prefix="quantgate-latency-check-") as scratch:
        for runtime, named in _forms(prefix, runtimes, Path(scratch)).items():
            fp32 = named["fp32"]
            if not fp32.path.is_dir() and held + batch * (sample_in + len(named) * onnx_activation_bytes(
                    fp32.path, shape)) <= budget.bytes:  # the ONNX graph's bound, which the stage asks first, fits
                continue
            try:
                probe = probe_runner(runtime, fp32, threads, shape)
            except ProbeFailed as exc:
                log.warning("%s: the FP32 model could not be measured before the run; the evaluate stage sizes it "
                            "(%s)", latency_loop(runtime), str(exc).splitlines()[0])
                continue
            int8 = sum(form.int8 for form in named.values())
            latency_batch_kept(choose_batch(
                latency_loop(runtime), fixed_bytes=held + probe.interpreter_bytes + probe.fixed_bytes,
                per_sample_bytes=sample_in + int((1 + int8 * INT8_SHARE) * probe.per_sample_bytes), budget=budget,
                requested=batch, ceiling=batch, setting=LATENCY_SETTING,
                subject=f"{runtime}'s {len(named)} models on {'x'.join(map(str, shape))}",
                measured_by=f"FP32 {probe.measured_by}; each INT8 model counted as {INT8_SHARE:g} of its "
                            "per-sample bytes",
                changes="make one sample smaller (data.transforms) or list fewer evaluate.runtimes"))


def _forms(prefix: Path, runtimes: tuple[str, ...], scratch: Path) -> dict[str, dict[str, ModelForm]]:
    """`model_forms` as the evaluate stage will have them, with the FP32 model written under `scratch` as it will
    open it: the ONNX file the convert stage will write, or the program under the export stage's file names
    (linked, not copied). The INT8 forms only count: they do not exist yet. Runtimes whose FP32 model cannot be
    written are left out."""
    model, params = prefix.with_name(f"{prefix.name}.pdmodel"), prefix.with_name(f"{prefix.name}.pdiparams")
    onnx_file, folder = scratch / "fp32.onnx", scratch / "program"
    folder.mkdir()
    os.symlink(model.resolve(), folder / MODEL_FILE)
    os.symlink(params.resolve(), folder / PARAMS_FILE)
    wanted = runtimes
    if any(runtime != PADDLE_INFERENCE for runtime in runtimes):
        try:
            to_onnx(model, params, onnx_file)
        except ConversionError as exc:
            log.warning("the FP32 model could not be converted to measure its latency batch before the run; the "
                        "convert stage says why (%s)", str(exc).splitlines()[0])
            wanted = tuple(runtime for runtime in runtimes if runtime == PADDLE_INFERENCE)
    return model_forms(wanted, onnx_file, onnx_file, folder, folder, onnx_file)
