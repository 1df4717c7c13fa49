"""Export for a model trained elsewhere: the imported FP32 program is the pipeline's FP32 model as it is.

Nothing is rebuilt from weights (quantgate has no network for it), so there is no trained model to compare
with: the program is copied byte for byte, run on one batch of the test split to prove that it runs on the
data as the data stage prepares it, and that batch's outputs are kept as the FP32 reference.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from quantgate.int8.program_memory import activation_bytes, probe_forward
from quantgate.int8.static_graph import load_program, persistable_dtypes, static_mode
from quantgate.memory import BATCHES_KEY, BatchChoice, choose_batch, memory_budget, tree_memory_bytes
from quantgate.memory.probe import ProbeFailed
from quantgate.samples.reading import open_data
from quantgate.stages.export.inference_model import (
    ExportMismatch,
    ExportResult,
    low_precision_parameters,
    require_legacy_format,
)
from quantgate.stages.export.outputs import (
    MODEL_FILE,
    MODEL_PREFIX,
    PARAMS_FILE,
    REFERENCE_OUTPUTS_FILE,
)
from quantgate.stages.export.pir import export_pir, is_pir_source
from quantgate.stages.source.outputs import MODEL_FILE as SOURCE_MODEL_FILE
from quantgate.stages.source.outputs import PARAMS_FILE as SOURCE_PARAMS_FILE

REFERENCE_BATCH = 32
REFERENCE_LOOP = "reference outputs"


def reference_chunk(prefix: Path, input_shape: tuple[int, ...]) -> BatchChoice:
    """How many of the reference images run at once: the executor frees what it no longer needs, so every
    activation of the program at once bounds a sample's cost (a 960x960 page: 1.3 GB; the 32 pages at once
    held 7.3 GB). Where that bound does not fit the whole batch, the run is measured in a child process
    (`probe_forward`; the same page: 0.085 GB, beside 0.58 GB held whatever the batch).

    Raises:
        MemoryRefused: one sample does not fit.
        ProbeFailed: the measuring process was killed (one that fails otherwise leaves the run to say why).
    """
    program, held, budget = activation_bytes(prefix, input_shape), tree_memory_bytes(), memory_budget()
    fixed, per_sample, measured_by = held + program.parameter_bytes, program.activation_bytes, "shapes"
    if fixed + REFERENCE_BATCH * per_sample > budget.bytes:
        try:
            probe = probe_forward(prefix, tuple(input_shape))
            fixed, per_sample, measured_by = held + probe.fixed_bytes, probe.per_sample_bytes, probe.measured_by
        except ProbeFailed as exc:
            if exc.killed:
                raise
    return choose_batch(REFERENCE_LOOP, fixed_bytes=fixed, per_sample_bytes=per_sample, budget=budget,
                        requested=None, ceiling=REFERENCE_BATCH, measured_by=measured_by,
                        setting="(none: the reference outputs run in chunks that fit)",
                        subject=f"{prefix.name}.pdmodel on inputs of {'x'.join(map(str, input_shape))}")


def export_program(source_dir: Path, data_dir: Path, out_dir: Path, num_workers: int = 0) -> ExportResult:
    """Keep the source stage's program as the FP32 model and one test batch's outputs as its reference.

    Raises:
        ExportMismatch: a parameter is not float32, or the program's outputs on the test batch are not finite
            or do not have one row per image.
        DataChanged: an image of the batch changed since the data stage recorded it.
    """
    if is_pir_source(source_dir):  # Paddle 3's default format: run in child processes, converted by paddle2onnx 2.x
        return export_pir(source_dir, data_dir, out_dir, num_workers)
    require_legacy_format()
    out_dir = Path(out_dir)
    shutil.copyfile(Path(source_dir) / SOURCE_MODEL_FILE, out_dir / MODEL_FILE)
    shutil.copyfile(Path(source_dir) / SOURCE_PARAMS_FILE, out_dir / PARAMS_FILE)
    data = open_data(data_dir)
    with static_mode():
        saved = load_program(out_dir / MODEL_PREFIX)
        dtypes = persistable_dtypes(saved.program)
        declared = list(saved.fetches[0].shape)
        # Read to the end (one batch): a loader left suspended keeps its worker processes alive, and their
        # exit later, once OpenVINO has compiled models in this process, crashed it (SIGSEGV).
        (images, _), = list(data.batches("test", REFERENCE_BATCH, num_workers, limit=REFERENCE_BATCH))
        chunk = reference_chunk(out_dir / MODEL_PREFIX, tuple(data.input_shape))
        outputs = saved.run(images, batch_size=chunk.batch_size)
    not_float32 = low_precision_parameters(dtypes)
    if not_float32:
        shown = dict(list(not_float32.items())[:5])
        raise ExportMismatch(f"the imported model stores {len(not_float32)} parameters in low precision ({shown}); "
                             "export its float32 weights (the master copy, not an FP16/BF16 inference model)")
    if len(outputs) != len(images) or not np.isfinite(outputs).all():
        raise ExportMismatch(f"the imported model gives {'non-finite' if len(outputs) == len(images) else 'misshaped'} "
                             f"outputs {list(outputs.shape)} on {len(images)} test images; check data.transforms "
                             "(size, color order, mean/std) against the model's training config")
    np.save(out_dir / REFERENCE_OUTPUTS_FILE, outputs)
    return ExportResult(
        model_file=MODEL_FILE,
        params_file=PARAMS_FILE,
        metrics={
            "format": "paddle-legacy-program",
            "parameters": len(dtypes),
            "parameter_dtypes": sorted(set(dtypes.values())),
            "max_abs_diff_vs_trained": None,  # nothing was trained here to compare with
            "max_abs_diff_limit": None,
            "checked_samples": int(len(images)),
            "output_shape": declared,
            "reference": f"the imported program's outputs on the first {len(images)} test images",
            BATCHES_KEY: {REFERENCE_LOOP: chunk.record()},
        },
    )
