"""The quantize stage's calibration batch: the largest that fits the memory budget, and when it matters.

Calibration keeps every activation it samples of a whole batch at once (`quantgate.int8.program_memory`), so
its batch is what memory decides: quantize.batch_size when that fits, else the largest batch that does (up to
CALIBRATION_CEILING when unset). 'hist', 'KL' and 'abs_max' measure per sample (each sample's range, histograms
summed over batches): the same scales at any batch. 'avg' and 'mse' take a statistic per batch, and batch_nums
counts batches, so for them the batch is part of the recipe: when it differs from the one asked for
(CALIBRATION_CEILING when unset), it goes into the stage's reuse digest (`calibration_environment`) and the record
says the scales may differ from a run with the larger batch.

When not even one sample fits, calibration ('hist', 'KL', 'abs_max', 'avg', 'mse') runs each sampling pass as up
to CALIBRATION_MAX_PASSES passes over the data, each keeping a share of the activations: more time, the same
scales (each tensor is measured on the same batches), so the number of passes stays out of every digest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from quantgate.config import QuantizeConfig
from quantgate.int8.program_memory import CALIBRATION_MAX_PASSES, calibration_cost
from quantgate.memory import BatchChoice, MemoryBudget, choose_batch_in_passes, memory_budget, tree_memory_bytes
from quantgate.samples.reading import StoredData, open_data
from quantgate.stages.export.outputs import MODEL_FILE
from quantgate.stages.quantize.calibration import HISTOGRAM_ALGOS, STATISTIC_ALGOS
from quantgate.stages.quantize.fine_histogram import FINE_BINS
from quantgate.stages.quantize.pir_seam import is_pir_export, onnx_graph_batch

log = logging.getLogger(__name__)

CALIBRATION_LOOP = "calibration"
CALIBRATION_CEILING = 32
PER_BATCH_ALGOS = ("avg", "mse")  # their thresholds are statistics of each batch
FINE_HISTOGRAM_BYTES = FINE_BINS * 8  # 'hist' and 'KL' in one pass: the counts held for a tensor while measured


def calibration_algos(config: QuantizeConfig) -> set[str]:
    """Every algorithm the stage may calibrate with: quantize.algo, and the search's recipes'."""
    recipes = config.search.recipes if config.strategy == "search" else ()
    return {config.algo, *(recipe.algo for recipe in recipes if recipe.algo is not None)}


_CHOSEN: dict[tuple, BatchChoice] = {}  # by model, data, budget, setting, algos: the digest's choice is the stage's
_PASSES: dict[tuple, int] = {}  # by model, data and budget: the passes of the last batch chosen for them


def calibration_choice(config: QuantizeConfig, model_dir: Path, data: StoredData,
                       budget: MemoryBudget | None = None) -> BatchChoice:
    """The calibration batch for the exported model in `model_dir` on `data`'s samples; the same choice every time
    this process is asked again for the same model, data, setting and budget.

    Raises:
        MemoryRefused: one sample does not fit the budget.
        ProbeFailed: the process measuring calibration's memory failed.
    """
    if is_pir_export(model_dir):  # a PIR program: its INT8 is calibrated on the ONNX graph (pir_seam)
        return onnx_graph_batch(config, model_dir, tuple(data.input_shape), budget)
    budget = budget or memory_budget()
    where = (str(Path(model_dir).resolve()), str(Path(data.folder).resolve()), budget)
    key = (*where, config.batch_size, frozenset(calibration_algos(config)))
    if key not in _CHOSEN:
        _CHOSEN[key] = _choose(config, Path(model_dir), data, budget)
        _PASSES[where] = _CHOSEN[key].passes
    return _CHOSEN[key]


def calibration_passes(config: QuantizeConfig, model_dir: Path, data: StoredData) -> int:
    """The passes over the data calibration's sampling takes for this model and data: those of the batch chosen
    for them (also when `config` calibrates at that batch already), else of the batch chosen now.

    Raises:
        MemoryRefused: one sample does not fit the budget.
    """
    where = (str(Path(model_dir).resolve()), str(Path(data.folder).resolve()), memory_budget())
    return _PASSES[where] if where in _PASSES else calibration_choice(config, model_dir, data).passes


def _choose(config: QuantizeConfig, model_dir: Path, data: StoredData, budget: MemoryBudget) -> BatchChoice:
    shape = tuple(data.input_shape)
    prefix = model_dir / Path(MODEL_FILE).stem
    one_pass = config.calibration_histogram == "one_pass" and calibration_algos(config) & set(HISTOGRAM_ALGOS)
    cost = calibration_cost(prefix, shape, statistics_per_tensor=FINE_HISTOGRAM_BYTES if one_pass else 0)
    splits = calibration_algos(config) <= set(STATISTIC_ALGOS)  # PaddleSlim's own sampling keeps every activation
    return choose_batch_in_passes(
        CALIBRATION_LOOP, fixed_bytes=tree_memory_bytes() + cost.fixed_bytes, per_sample_bytes=cost.per_sample_bytes,
        split_bytes=cost.kept_bytes, max_passes=CALIBRATION_MAX_PASSES if splits else 1,
        what_splits="the activations calibration keeps", measured_by=cost.measured_by, budget=budget,
        requested=config.batch_size, ceiling=CALIBRATION_CEILING, setting="quantize.batch_size",
        subject=f"{prefix.name}.pdmodel on inputs of {'x'.join(map(str, shape))}")


def depends_on_batch(config: QuantizeConfig) -> bool:
    """Whether the scales can depend on the calibration batch: a per-batch algorithm may run, or batch_nums counts
    batches (a smaller batch then calibrates on fewer samples)."""
    return config.batch_nums is not None or bool(calibration_algos(config) & set(PER_BATCH_ALGOS))


def batch_matters(config: QuantizeConfig, choice: BatchChoice) -> bool:
    """Whether the scales may differ from those of the batch asked for: they depend on it, and it was not kept."""
    return depends_on_batch(config) and choice.batch_size != (config.batch_size or CALIBRATION_CEILING)


def fitted(config: QuantizeConfig, choice: BatchChoice) -> QuantizeConfig:
    """`config` calibrating at the chosen batch; a batch the scales depend on, not kept, is logged as such."""
    if batch_matters(config, choice):
        log.warning("quantize: calibrating at batch %d, not %d: the scales may differ from a run at the larger batch "
                    "(%s)", choice.batch_size, config.batch_size or CALIBRATION_CEILING, choice.reason)
    return config.model_copy(update={"batch_size": choice.batch_size})


def choice_record(config: QuantizeConfig, choice: BatchChoice) -> dict:
    """The manifest's record of the calibration batch: the choice, and whether the scales may differ for it."""
    return {**choice.record(), "scales_may_differ_from_requested_batch": batch_matters(config, choice)}


def calibration_environment(config: QuantizeConfig, folders: Callable[[], tuple[Path, Path]]) -> dict:
    """What the stage's reuse digest adds for its batch: the chosen batch where the scales depend on it and it is
    not the one asked for; nothing otherwise (the budget, a machine setting, stays out of the digest).
    `folders()` gives the export and data stages' folders; it is called only when the batch can matter.

    Raises:
        MemoryRefused: one sample does not fit the budget (before the stage runs).
    """
    if not depends_on_batch(config):
        return {}
    model_dir, data_dir = folders()
    choice = calibration_choice(config, model_dir, open_data(data_dir))
    return {"calibration_batch_size": choice.batch_size} if batch_matters(config, choice) else {}
