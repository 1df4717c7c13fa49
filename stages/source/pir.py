"""A PIR inference model (Paddle 3's default export) as the source stage reads it.

PaddleSlim 2.6 and paddle2onnx 1.3.1 read only the legacy format, and Paddle 3.3.1 cannot turn a PIR program back
into it (its translator goes legacy -> PIR only; a PIR model loaded with paddle.jit.load cannot be re-saved under
the old IR: tests/stages/test_source_pir.py holds both findings). So a PIR model keeps its format: what the program
is comes from its JSON (quantgate.pir.folder), one sample runs in a child process with FLAGS_enable_pir_api=1
(quantgate.pir.children), and paddle2onnx 2.x converts it (the export stage).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.pir.folder import PirFolder, find_pir_folder, program_facts, require_pir_program
from quantgate.stages.source.errors import ModelProblem
from quantgate.stages.source.model_summary import PROBABILITY_OPS, ModelSummary, TensorSpec

PIR_FORMAT = "paddle-pir-program"
LEGACY_PROGRAM_SUFFIX = ".pdmodel"


def is_pir_model(folder: Path, prefix: str) -> bool:
    """True for a PIR export: `<prefix>.json` is there and `<prefix>.pdmodel` is not (file names only)."""
    folder = Path(folder)
    return (folder / f"{prefix}.json").is_file() and not (folder / f"{prefix}{LEGACY_PROGRAM_SUFFIX}").exists()


def pir_folder(folder: Path, prefix: str) -> PirFolder:
    """The PIR model in `folder`.

    Raises:
        ModelProblem: `<prefix>.json` is not a PIR program, or the parameters are missing.
    """
    from quantgate.pir.errors import PirProblem

    try:
        found = find_pir_folder(folder, prefix)
    except PirProblem as exc:
        raise ModelProblem([str(exc)]) from exc
    if found is None:
        raise ModelProblem([f"{folder} holds no {prefix}.json"])
    return found


def pir_summary(found: PirFolder, sample_shape: tuple[int, ...] | None) -> ModelSummary:
    """What the PIR program is, from its JSON; with `sample_shape` ([C, H, W]) one zero sample is run in Paddle
    Inference (a child process) to measure the output's shape.

    Raises:
        PirProblem: Paddle cannot run the sample (the caller falls back to the declared shapes).
    """
    from quantgate.pir.children import paddle_outputs

    facts = program_facts(require_pir_program(found.program))
    inputs = tuple(TensorSpec(spec.name, spec.shape, spec.dtype) for spec in facts.inputs)
    outputs = tuple(TensorSpec(spec.name, spec.shape, spec.dtype) for spec in facts.outputs)
    measured = None
    if sample_shape is not None and len(inputs) == 1 and outputs:
        measured = tuple(paddle_outputs(found.program, found.params, np.zeros((1, *sample_shape), np.float32))[0].shape)
    kind = "probabilities" if facts.output_ops and facts.output_ops[0] in PROBABILITY_OPS else "logits"
    return ModelSummary(inputs, outputs, kind, facts.ops, facts.parameters, len(facts.parameter_dtypes),
                        facts.parameter_dtypes, measured)
