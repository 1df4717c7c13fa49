"""Export stage: the float32 master weights as a Paddle inference model, checked against training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from quantgate.errors import StageError
from quantgate.int8.static_graph import load_program, persistable_dtypes, static_mode
from quantgate.models.models import DEFAULT_NECK, build_model, load_weights
from quantgate.samples.reading import open_data
from quantgate.stages.export.outputs import MODEL_FILE, MODEL_PREFIX, PARAMS_FILE

INPUT_NAME = "x"
MAX_ABS_DIFF = 1e-4
CHECK_BATCH = 256


class ExportMismatch(StageError):
    """The exported inference model is not the trained float32 model."""


@dataclass(frozen=True)
class ExportResult:
    model_file: str
    params_file: str
    metrics: dict


def low_precision_parameters(dtypes: dict[str, str]) -> dict[str, str]:
    """The floating-point parameters that are not float32 (an FP16/BF16 copy instead of the master weights)."""
    # Weights are the floating-point parameters; an LSTM also saves its uint8 dropout state, which is no weight.
    return {name: dtype for name, dtype in dtypes.items() if dtype != "float32" and dtype.startswith(("float", "bfloat"))}


def require_legacy_format() -> None:
    if paddle.framework.use_pir_api():
        raise ExportMismatch(
            "Paddle is in PIR mode, which PaddleSlim cannot quantize; import quantgate before paddle "
            "or set FLAGS_enable_pir_api=0 in the environment"
        )


def export(
    weights_path: Path, reference_logits_path: Path, data_dir: Path, architecture: str, out_dir: Path,
    num_workers: int = 0, neck: str = DEFAULT_NECK,
) -> ExportResult:
    """Save the trained float32 weights with paddle.jit.save and prove the saved model is them. The model
    takes any batch size; its output is what training's was ([N, classes], or [N, T, C] for text).
    `neck`: the train stage's `neck` metric, for the built-in 'crnn'.

    Raises:
        ExportMismatch: a saved parameter is not float32, or the saved model's test-split outputs
            differ from the trained model's float32 outputs by more than 1e-4.
        ModelError: the weights do not fit `architecture` (another network, or another neck).
    """
    require_legacy_format()
    data = open_data(data_dir)
    with np.load(weights_path, allow_pickle=False) as stored:
        weights = {name: stored[name] for name in stored.files}
    model = load_weights(build_model(architecture, data.num_classes, data.input_shape, neck), weights, architecture)
    prefix = Path(out_dir) / MODEL_PREFIX
    spec = paddle.static.InputSpec([None, *data.input_shape], "float32", INPUT_NAME)
    paddle.jit.save(model, str(prefix), input_spec=[spec])

    reference = np.load(reference_logits_path, allow_pickle=False)
    with static_mode():
        saved = load_program(prefix)
        dtypes = persistable_dtypes(saved.program)
        output_shape = list(saved.fetches[0].shape)  # -1 where the size is dynamic (the batch)
        # The test split, batch by batch: the reference logits cover it; its images never sit in memory at once.
        exported = np.concatenate([saved.run(images) for images, _ in
                                   data.batches("test", CHECK_BATCH, num_workers)] or [np.zeros_like(reference)])
    not_float32 = low_precision_parameters(dtypes)
    if not_float32:
        raise ExportMismatch(f"exported parameters are not float32: {not_float32}; export the float32 master weights")
    if exported.shape != reference.shape:
        raise ExportMismatch(f"exported model's outputs have shape {list(exported.shape)} on the test split, the "
                             f"trained model's {list(reference.shape)}; export with the architecture it was trained as")
    max_abs_diff = float(np.abs(exported - reference).max()) if exported.size else 0.0
    if not max_abs_diff <= MAX_ABS_DIFF:
        raise ExportMismatch(
            f"exported model's outputs differ from the trained model's by {max_abs_diff:.3g} "
            f"(limit {MAX_ABS_DIFF}) on the test split; the export did not capture the trained weights"
        )
    return ExportResult(
        model_file=MODEL_FILE,
        params_file=PARAMS_FILE,
        metrics={
            "format": "paddle-legacy-program",
            "parameters": len(dtypes),
            "parameter_dtypes": sorted(set(dtypes.values())),
            "max_abs_diff_vs_trained": max_abs_diff,
            "max_abs_diff_limit": MAX_ABS_DIFF,
            "checked_samples": int(len(reference)),
            "output_shape": output_shape,
        },
    )
