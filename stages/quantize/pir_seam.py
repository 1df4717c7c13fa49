"""The seam where a PIR model's INT8 will come from: PaddleSlim cannot read a PIR program (no PIR support in 2.6,
and Paddle 3.3.1's static quantizer asserts on one), so its INT8 is to be calibrated on the FP32 ONNX graph
paddle2onnx 2.x writes (issue 52, item 3). Until that producer lands, a PIR export is refused here, by name, before
any PaddleSlim call would fail on a missing model.pdmodel."""

from __future__ import annotations

from pathlib import Path

from quantgate.errors import BadInput, StageError
from quantgate.stages.export.outputs import PIR_MODEL_FILE


class PirNotQuantizable(StageError, BadInput):
    """INT8 for a PIR model is calibrated on its ONNX graph, which is not available yet (exit 2)."""


def refuse_pir_export(model_dir: Path) -> None:
    """Raises PirNotQuantizable when `model_dir` (the export stage's folder) holds a PIR program."""
    if (Path(model_dir) / PIR_MODEL_FILE).is_file():
        raise PirNotQuantizable(
            f"INT8 for a PIR model is calibrated on its ONNX graph: not available yet ({Path(model_dir) / PIR_MODEL_FILE}"
            " is a PIR program, which PaddleSlim 2.6 cannot quantize). Its FP32 ONNX conversion works; for INT8 now, "
            "export the model in the legacy format from its training checkpoint (docs/trained-models.md)")
