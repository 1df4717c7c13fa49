"""The seam where a PIR model's INT8 comes from: PaddleSlim cannot read a PIR program (no PIR support in 2.6, and
Paddle 3.3.1's static quantizer asserts on one), so quantgate calibrates it on the FP32 ONNX graph the export stage
wrote with paddle2onnx 2.x (`onnx_calibration`, through `onnx_candidates`).

`strategy: single` calibrates that graph with the configured recipe; the search's candidates are calibrated on it
too (`onnx_candidates.OnnxGraphProducer`, chosen by `TrialRunner` from `is_pir_export`), where a fall-back is a
skip list: the layer's Q/DQ pairs dropped.
"""

from __future__ import annotations

from pathlib import Path

from quantgate.errors import BadInput, StageError
from quantgate.memory import BatchChoice, memory_budget
from quantgate.stages.export.outputs import FP32_ONNX_FILE, PIR_MODEL_FILE

ONNX_GRAPH_BATCH = 32  # the calibration batch on the ONNX graph when quantize.batch_size is unset (`stored_batches`)


class PirNotQuantizable(StageError, BadInput):
    """A PIR model asked for what calibration on its ONNX graph does not do (exit 2)."""


def is_pir_export(model_dir: Path) -> bool:
    """The export stage's folder holds a PIR program (Paddle 3's default format), not a legacy one."""
    return (Path(model_dir) / PIR_MODEL_FILE).is_file()


def require_onnx_graph(model_dir: Path) -> Path:
    """The FP32 ONNX graph a PIR export's INT8 is calibrated on.

    Raises:
        PirNotQuantizable: the export holds no FP32 ONNX model (an export from before the export stage made one).
    """
    graph = Path(model_dir) / FP32_ONNX_FILE
    if not graph.is_file():
        raise PirNotQuantizable(f"the PIR export {model_dir} holds no {FP32_ONNX_FILE} to calibrate on: it predates "
                                "the export stage converting PIR models; run again with --no-reuse")
    return graph


def onnx_graph_batch(config, model_dir: Path) -> BatchChoice:
    """The calibration batch on a PIR export's ONNX graph: quantize.batch_size, else ONNX_GRAPH_BATCH. Not fitted to
    the memory budget (no Paddle program to measure): the record says so.

    Raises:
        PirNotQuantizable: as `require_onnx_graph`.
    """
    require_onnx_graph(model_dir)
    size = config.batch_size or ONNX_GRAPH_BATCH
    return BatchChoice(
        loop="calibration", batch_size=size, requested=config.batch_size, ceiling=ONNX_GRAPH_BATCH, fixed_bytes=0,
        per_sample_bytes=0, budget=memory_budget(), measured_by="not measured",
        reason=f"{'quantize.batch_size' if config.batch_size else 'the default'} ({size}): calibration on the ONNX "
               "graph holds one batch's measured tensors; it is not fitted to the memory budget")
