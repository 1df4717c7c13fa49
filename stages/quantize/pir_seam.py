"""The seam where a PIR model's INT8 comes from: PaddleSlim cannot read a PIR program (no PIR support in 2.6, and
Paddle 3.3.1's static quantizer asserts on one), so quantgate calibrates it on the FP32 ONNX graph the export stage
wrote with paddle2onnx 2.x (`onnx_calibration`, through `onnx_candidates`).

`strategy: single` calibrates that graph with the configured recipe; the search's candidates are calibrated on it
too (`onnx_candidates.OnnxGraphProducer`, chosen by `TrialRunner` from `is_pir_export`), where a fall-back is a
skip list: the layer's Q/DQ pairs dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from quantgate.errors import BadInput, StageError
from quantgate.memory import BatchChoice, MemoryBudget, choose_batch, memory_budget, tree_memory_bytes
from quantgate.memory.probe import probe
from quantgate.stages.export.outputs import FP32_ONNX_FILE, PIR_MODEL_FILE

# The batches the calibration's memory is probed at: 2, not 3, since a 960x960 page's measured tensors are GBs and the
# probe must fit the budget too
PROBE_BATCHES = (1, 2)
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


def onnx_graph_batch(config, model_dir: Path, sample_shape: tuple[int, ...],
                     budget: MemoryBudget | None = None) -> BatchChoice:
    """The calibration batch on a PIR export's ONNX graph: quantize.batch_size when it fits the memory budget, else
    the largest that does (up to ONNX_GRAPH_BATCH when unset). A batch's measured tensors are all held at once, so
    what a sample of `sample_shape` costs, probed in child processes (`calibration_bytes`), decides
    it; the same choice every time this process asks again for the same graph, shape, setting and budget.

    Raises:
        PirNotQuantizable: as `require_onnx_graph`.
        MemoryRefused: one sample does not fit the budget.
        ProbeFailed: a process measuring calibration's memory failed.
    """
    graph, budget = require_onnx_graph(model_dir), budget or memory_budget()
    key = (str(graph.resolve()), graph.stat().st_mtime_ns, tuple(sample_shape), config.batch_size, budget)
    if key not in _CHOSEN:
        cost = calibration_bytes(graph, tuple(sample_shape))
        _CHOSEN[key] = choose_batch(
            "calibration", fixed_bytes=tree_memory_bytes() + cost.fixed, per_sample_bytes=cost.per_sample,
            budget=budget, requested=config.batch_size, ceiling=ONNX_GRAPH_BATCH, setting="quantize.batch_size",
            subject=f"calibration on {graph.name} (quantgate's, on the ONNX graph) on inputs of "
                    f"{'x'.join(map(str, sample_shape))}", measured_by=cost.measured_by)
    return _CHOSEN[key]


_CHOSEN: dict[tuple, BatchChoice] = {}


@dataclass(frozen=True)
class CalibrationBytes:
    """What calibrating the graph holds in memory: the session and model (`fixed`) and, per sample of a batch, the
    input and everything measuring its tensors holds (`per_sample`)."""

    fixed: int
    per_sample: int
    measured_by: str


@lru_cache(maxsize=8)
def calibration_bytes(fp32_onnx: Path, sample_shape: tuple[int, ...]) -> CalibrationBytes:
    """Measured in child processes (`onnx_calibration_probe`), once per graph and shape in this process (a stage's
    graph is immutable): each batch's measured tensors are all held at once (`onnx_calibration.measure`), so they,
    not the graph, decide the batch.

    Raises:
        ProbeFailed: a probing process failed (e.g. killed for memory at batch 1 or 2).
    """
    found = probe("quantgate.stages.quantize.onnx_calibration_probe",
                  ["--graph", str(fp32_onnx), "--shape", *map(str, sample_shape)], PROBE_BATCHES)
    sample = 4 * int(np.prod(sample_shape))
    return CalibrationBytes(fixed=found.fixed_bytes, per_sample=found.per_sample_bytes + sample,
                            measured_by=f"calibration on the ONNX graph {found.measured_by}")
