"""PaddleSlim's post-training calibration with the same thresholds, measured for less, and measured once.

`Calibration` is paddle's `PostTrainingQuantization` (what PaddleSlim's `quant_post_static` builds) with its
sampling passes replaced, for the algorithms 'hist', 'KL', 'abs_max', 'avg' and 'mse' (`mse_search`):

- activations are read in place (a view of the scope's tensor), not copied to numpy first;
- one pass over a tensor gives each sample's max |x| and the tensor's min |x|: PaddleSlim's abs-min/max pass,
  and all that 'abs_max' and 'avg' need;
- histograms are binned arithmetically, each guess checked against the float32 image of PaddleSlim's bin
  edges, instead of numpy's sort-and-search path that an array of edges takes; the counts are the same;
- tensors are cut into cache-sized chunks, two tensors at a time (numpy releases the GIL);
- `histogram="one_pass"`: one forward pass instead of two, each activation measured once by
  `fine_histogram` (ranges and a fine histogram of fixed bins, from which PaddleSlim's bins are read off
  once the range is known). The thresholds are then PaddleSlim's to within a fine bin, not scale for scale.

What the passes measure (`Statistics`) depends on the model, the calibration rows and the batch size only,
not on hist_percent, bias_correction, weight_quantize_type or skip_tensors: given it, `Calibration` runs no
forward pass at all. Every threshold then goes through paddle's own code (`_calculate_kl_hist_threshold`,
`_update_program`, ...), so the saved program is PaddleSlim's, scale for scale.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import io
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from paddle.base import core
from paddle.static.quantization import PostTrainingQuantization, utils

from quantgate.memory import return_freed_memory
from quantgate.stages.quantize import fine_histogram, mse_search
from quantgate.stages.quantize.program_edits import graph_edits_without_scans

STATISTIC_ALGOS = ("hist", "KL", "abs_max", "avg", "mse")  # algorithms whose sampling this module replaces
HISTOGRAM_ALGOS = ("hist", "KL")
HISTOGRAM_METHODS = ("one_pass", "exact")  # fine bins in the first pass, or PaddleSlim's two passes
STATISTICS_FILE, STATISTICS_NAMES_FILE = "statistics.npz", "statistics.json"
CHUNK = 1 << 17  # elements binned at a time: 512 KiB of float32 stays in a core's L2
EDGE_MARGIN = 1 / 256  # a guess this close (in bins) to an edge is checked against the edges themselves
THREADS = 2


@dataclass
class Statistics:
    """What the sampling passes measured on the FP32 activations, by tensor name.

    `row_abs_max[name]`: per batch, each sample's max |x| (float32); `abs_min[name]`: the smallest |x| seen;
    `histograms[name]`: counts over PaddleSlim's 2048 bins of [abs min, abs max], or None before that pass;
    `fine_histograms[name]`: (first bin, counts) of `fine_histogram`'s fixed bins, measured with the ranges;
    `mse_losses[name]`: per batch, (each of 'mse''s candidate scales' loss, the batch's max |x|) (`mse_search`);
    `channel_abs_max[name]`: per channel, the max |x| of a tensor equalization rescales, over the same batches
    (quantgate.int8.onnx_equalization), or None when nothing was equalized from them.
    """

    batches: int
    row_abs_max: dict[str, list[np.ndarray]] = field(default_factory=dict)
    abs_min: dict[str, float] = field(default_factory=dict)
    zero_size: set[str] = field(default_factory=set)
    histograms: dict[str, np.ndarray] | None = None
    fine_histograms: dict[str, tuple[int, np.ndarray]] | None = None
    mse_losses: dict[str, list[tuple[np.ndarray, float]]] | None = None
    channel_abs_max: dict[str, np.ndarray] | None = None

    def abs_max(self, name: str) -> float:
        return float(max(rows.max() for rows in self.row_abs_max[name]))

    def add_ranges(self, name: str, values: np.ndarray, fine: bool = False) -> bool:
        """One batch of `name`: each sample's max |x| and the min |x| (`fine`: its fine histogram too, in the same
        pass); False, `name` noted in `zero_size`, when `values` is empty."""
        if values.size == 0:
            self.zero_size.add(name)
            return False
        if fine:
            row_abs_max, abs_min, counts = fine_histogram.measure(values, self.fine_histograms.get(name))
            self.fine_histograms[name] = counts
        else:
            row_abs_max, abs_min = _ranges(values)
        self.row_abs_max.setdefault(name, []).append(row_abs_max)
        self.abs_min[name] = min(abs_min, self.abs_min.get(name, np.inf))
        return True

    def histogram_edges(self, name: str, bins: int) -> np.ndarray:
        """The edges PaddleSlim bins `name` with (numpy's, for an empty array over the abs-min/max range)."""
        return np.histogram([], bins=bins, range=(self.abs_min[name], self.abs_max(name)))[1]

    def histogram(self, name: str, bins: int) -> np.ndarray:
        """`name`'s counts over PaddleSlim's `bins`: measured on them, or read off the fine histogram."""
        if self.histograms is not None and name in self.histograms:
            return self.histograms[name].copy()
        first, counts = self.fine_histograms[name]
        return fine_histogram.uniform_histogram(counts, first, self.abs_min[name], self.abs_max(name),
                                                self.histogram_edges(name, bins))

    def save(self, folder: Path, with_histograms: bool = True) -> None:
        """Plain arrays (no pickle) and a JSON index; `with_histograms=False` writes the first pass only."""
        names = sorted(self.row_abs_max)
        arrays = {f"rows{i}_{b}": rows for i, name in enumerate(names) for b, rows in enumerate(self.row_abs_max[name])}
        arrays.update({f"hist{i}": self.histograms[name] for i, name in enumerate(names)
                       if with_histograms and self.histograms and name in self.histograms})
        fine = self.fine_histograms or {}
        arrays.update({f"fine{i}": fine[name][1] for i, name in enumerate(names) if name in fine})
        mse = self.mse_losses or {}
        arrays.update({f"mse{i}_{b}": np.append(losses, largest) for i, name in enumerate(names)
                       for b, (losses, largest) in enumerate(mse.get(name, ()))})
        np.savez(folder / STATISTICS_FILE, **arrays)
        index = {"batches": self.batches, "names": names, "abs_min": [self.abs_min[name] for name in names],
                 "zero_size": sorted(self.zero_size), "histograms": with_histograms and self.histograms is not None,
                 "fine_first": ({name: fine[name][0] for name in names if name in fine}
                                if self.fine_histograms is not None else None),
                 "mse_losses": self.mse_losses is not None}
        (folder / STATISTICS_NAMES_FILE).write_text(json.dumps(index, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Statistics:
        index = json.loads((folder / STATISTICS_NAMES_FILE).read_text())
        with np.load(folder / STATISTICS_FILE, allow_pickle=False) as arrays:
            names, keys = index["names"], set(arrays.files)
            rows = {name: [arrays[f"rows{i}_{b}"] for b in range(index["batches"]) if f"rows{i}_{b}" in keys]
                    for i, name in enumerate(names)}
            histograms = ({name: arrays[f"hist{i}"] for i, name in enumerate(names) if f"hist{i}" in keys}
                          if index["histograms"] else None)
            first = index.get("fine_first")
            fine = ({name: (first[name], arrays[f"fine{i}"]) for i, name in enumerate(names) if name in first}
                    if first is not None else None)
            mse = ({name: [(arrays[key][:-1], float(arrays[key][-1])) for b in range(index["batches"])
                           if (key := f"mse{i}_{b}") in keys] for i, name in enumerate(names)}
                   if index.get("mse_losses") else None)
        return cls(index["batches"], rows, dict(zip(names, index["abs_min"])), set(index["zero_size"]), histograms,
                   fine, mse)


def _view(scope, name: str) -> np.ndarray:
    """The scope's tensor `name` as an array: a view for float32 (no copy), else paddle's own copy."""
    tensor = scope.find_var(name).get_tensor()
    shape = tuple(tensor.shape())
    size = int(np.prod(shape)) if shape else 1
    if tensor._dtype() != core.VarDesc.VarType.FP32 or size == 0:
        return utils.load_variable_data(scope, name)
    return np.ctypeslib.as_array((ctypes.c_float * size).from_address(tensor._ptr())).reshape(shape or (1,))


def _sample_size(var) -> int:
    """A variable's elements per sample (its shape with the batch and any unknown size taken as 1)."""
    return int(np.prod([max(size, 1) for size in var.shape], dtype=np.int64))


def _shares(names: list[str], sizes: dict[str, int], count: int) -> list[list[str]]:
    """`names` in `count` shares of nearly equal size: the largest first, each to the smallest share so far."""
    shares: list[list[str]] = [[] for _ in range(min(count, len(names)) or 1)]
    totals = [0] * len(shares)
    for name in sorted(names, key=lambda name: (-sizes[name], name)):
        smallest = totals.index(min(totals))
        shares[smallest].append(name)
        totals[smallest] += sizes[name]
    return [sorted(share) for share in shares]


def _ranges(values: np.ndarray) -> tuple[np.ndarray, float]:
    """(each sample's max |x| as float32, the smallest |x|): sample = first axis, as PaddleSlim's 'avg' has it."""
    rows = values.reshape(values.shape[0], -1)
    low, high = rows.min(axis=1), rows.max(axis=1)
    row_abs_max = np.abs(np.maximum(-low, high)).astype(values.dtype, copy=False)  # abs: -0.0 would save as -0
    if (low >= 0).all():
        return row_abs_max, float(low.min())
    if (high <= 0).all():
        return row_abs_max, float(-high.max())
    flat, smallest = values.reshape(-1), np.inf
    buffer = np.empty(min(CHUNK, flat.size), values.dtype)
    for start in range(0, flat.size, CHUNK):
        part = buffer[: min(CHUNK, flat.size - start)]
        np.abs(flat[start: start + CHUNK], out=part)
        smallest = min(smallest, part.min())
    return row_abs_max, float(smallest)


def _histogram(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """np.histogram(|values|, bins=edges) for PaddleSlim's uniform float64 `edges`, without its sort.

    A value's bin is guessed in float32 arithmetic (off by far less than EDGE_MARGIN of a bin); guesses near an
    edge are settled by comparing with `floor32`, each edge rounded up to float32, so that `x >= floor32[i]`
    exactly when `x >= edges[i]`. Anything else (other dtypes, ranges float32 cannot resolve) takes numpy's path.
    """
    bins = len(edges) - 1
    low, high = float(edges[0]), float(edges[-1])
    scale = np.float32(bins / (high - low))
    resolvable = (values.dtype == np.float32 and np.float32(low) == low and np.float32(high) == high
                  and np.spacing(np.float32(high)) * scale < EDGE_MARGIN / 4)
    if not resolvable:
        return np.histogram(np.abs(values), bins=edges)[0]
    floor32 = edges.astype(np.float32)
    floor32[floor32 < edges] = np.nextafter(floor32[floor32 < edges], np.float32(np.inf))
    counts = np.zeros(bins, np.int64)
    flat, size = values.reshape(-1), min(CHUNK, values.size)
    scaled, fraction, whole = np.empty(size, np.float32), np.empty(size, np.float32), np.empty(size, np.float32)
    guess = np.empty(size, np.intp)  # bincount's own index type: no conversion inside it
    for start in range(0, flat.size, CHUNK):
        end = min(start + CHUNK, flat.size) - start
        part, frac, index = scaled[:end], fraction[:end], guess[:end]
        np.abs(flat[start: start + CHUNK], out=part)
        if low:
            np.subtract(part, np.float32(low), out=part)
        np.multiply(part, scale, out=part)
        np.modf(part, out=(frac, whole[:end]))
        np.copyto(index, whole[:end], casting="unsafe")
        near = np.flatnonzero((frac < EDGE_MARGIN) | (frac > 1 - EDGE_MARGIN))
        if near.size:  # the last edge belongs to the last bin, as in numpy
            exact = np.abs(flat[start + near])
            index[near] = np.minimum(np.searchsorted(floor32, exact, side="right") - 1, bins - 1)
        counts += np.bincount(index, minlength=bins)
    return counts


class Calibration(PostTrainingQuantization):
    """PostTrainingQuantization with faster sampling and reusable `Statistics` (STATISTIC_ALGOS).

    `statistics`: what an earlier calibration of the same model, rows and batch size measured; the passes it
    already holds are not run. `histogram`: HISTOGRAM_METHODS, how 'hist' and 'KL' measure (module docstring).
    `passes`: each sampling pass runs this many times over the data, each keeping a share of the sampled tensors
    (balanced by size), so a batch holds that share of them; what each tensor measures is the same. After
    `quantize()`, `statistics` holds what was used, `forward_s` and `statistics_s` the seconds spent in the executor
    and in measuring, `forward_batches` the batches run.

    Raises:
        ValueError: an algorithm, round type or option this class does not reimplement.
    """

    def __init__(self, *, statistics: Statistics | None = None, histogram: str = "exact", passes: int = 1,
                 **settings):
        super().__init__(**settings)
        if passes < 1:
            raise ValueError(f"passes must be at least 1, not {passes}")
        self.passes = passes
        if histogram not in HISTOGRAM_METHODS:
            raise ValueError(f"histogram must be one of {HISTOGRAM_METHODS}, not {histogram!r}")
        self.histogram_method = histogram
        if self._algo not in STATISTIC_ALGOS:
            raise ValueError(f"Calibration covers algo {STATISTIC_ALGOS}, not {self._algo!r}; "
                             "use PaddleSlim's PostTrainingQuantization for it")
        if self._round_type != "round" or self._return_graph or self.FLAG or self._scale_dict is not None:
            raise ValueError("Calibration supports round_type='round' on a saved model only "
                             "(no adaround, return_graph, program or scale_dict)")
        self.statistics = statistics
        self.forward_s = self.statistics_s = 0.0
        self.forward_batches = 0

    def quantize(self):
        """Measure what is missing, then let paddle turn the thresholds into the quantized program."""
        self._load_model_data()
        self._collect_target_varnames()
        needs_histograms = self._algo in HISTOGRAM_ALGOS
        names = sorted(self._quantized_act_var_name)
        if needs_histograms and self.histogram_method == "one_pass":
            if self.statistics is None or self.statistics.fine_histograms is None:
                self.statistics = Statistics(0, fine_histograms={})
                self._sample(names, self._measure_once, finish=self._trim_fine_histograms)
        elif self._algo == "mse":
            if self.statistics is None or self.statistics.mse_losses is None:
                # a copy: statistics given to this run are never changed by it
                self.statistics = (Statistics(0) if self.statistics is None
                                   else dataclasses.replace(self.statistics, mse_losses=None))
                measure_ranges = not self.statistics.row_abs_max  # no earlier pass measured them
                self.statistics.mse_losses = {}
                self._sample(names, lambda name: self._measure_mse(name, measure_ranges))
        elif self.statistics is None or (needs_histograms and self.statistics.histograms is None):
            if self.statistics is None:
                self.statistics = Statistics(0)
                self._sample(names, self._measure_ranges)
            if needs_histograms:  # a copy: statistics given to this run are never changed by it
                self.statistics = dataclasses.replace(self.statistics, histograms={})
                self._sample(names, self._measure_histogram)
        self._set_thresholds(names)
        with contextlib.redirect_stderr(io.StringIO()), graph_edits_without_scans():  # tqdm bars go
            self._update_program()
        self._save_output_threshold()
        if any(kind in self.quant_config.activation_quant_operation_types for kind in self._dynamic_quantize_op_type):
            self._collect_dynamic_quantize_op_threshold(self._dynamic_quantize_op_type)
        utils.move_persistable_var_to_global_block(self._program)
        return self._program

    def _trim_fine_histograms(self, names: list[str]) -> None:
        """Keep only the filled span of each of `names`' fine histograms (FINE_BINS counts, 1 MB, while measured)."""
        fine = self.statistics.fine_histograms
        for name in names:
            if name in fine and len(fine[name]) == fine_histogram.FINE_BINS:
                fine[name] = fine_histogram.trimmed(fine[name])

    def _sample(self, names: list[str], measure, finish=None) -> None:
        """A sampling pass: `measure(name)` on every activation after each forward run, the activations kept in the
        scope (persistable) one share at a time, `passes` shares in all; cleared from the scope after their pass,
        when `finish(share)` is called."""
        variables: dict[str, list] = {}  # a name may have a variable in several blocks: as PaddleSlim, set each
        for var in self._program.list_vars():
            variables.setdefault(var.name, []).append(var)
        for share in _shares(names, {name: _sample_size(variables[name][0]) for name in names}, self.passes):
            self._keep(variables, share, True)
            try:
                self._run_pass(share, measure)
                if finish is not None:
                    finish(share)
            finally:
                self._keep(variables, share, False)
                if self.passes > 1:  # else the next share's tensors grow the heap beside this one's freed pages
                    return_freed_memory()

    def _keep(self, variables: dict[str, list], names: list[str], keep: bool) -> None:
        """Make `names` persistable (kept in the scope after a run), or not and cleared from the scope."""
        for name in names:
            for var in variables[name]:
                var.persistable = keep
            if not keep and (found := self._scope.find_var(name)) is not None:
                found.get_tensor()._clear()

    def _run_pass(self, names: list[str], measure) -> None:
        """One pass over the calibration batches, `measure(name)` on every activation after each forward run."""
        batches = 0
        with ThreadPoolExecutor(THREADS) as pool:
            for feed in self._data_loader():
                started = time.perf_counter()
                self._executor.run(program=self._program, feed=feed, fetch_list=self._fetch_list,
                                   return_numpy=False, scope=self._scope)
                measured = time.perf_counter()
                list(pool.map(measure, names))
                # The activations a batch does not keep were freed between those it keeps: without this the heap
                # grows run by run around them (the 960x960 detector, a third kept: 0.65 -> 1.09 GB in 16 pages,
                # 0.66 with it; ~12 ms a batch)
                return_freed_memory()
                self.forward_s += measured - started
                self.statistics_s += time.perf_counter() - measured
                batches += 1
                if self._batch_nums and batches >= self._batch_nums:
                    break
        self.forward_batches += batches
        self.statistics.batches = max(self.statistics.batches, batches)

    def _measure_ranges(self, name: str, fine: bool = False) -> None:
        """`name`'s per-sample max |x| and min |x|; `fine`: its fine histogram too, in the same pass."""
        self.statistics.add_ranges(name, _view(self._scope, name), fine)

    def _measure_once(self, name: str) -> None:
        """The ranges and the fine histogram of `name`, in one pass (`fine_histogram.measure`)."""
        self._measure_ranges(name, fine=True)

    def _measure_mse(self, name: str, with_ranges: bool) -> None:
        """The losses of 'mse''s candidate scales on `name` in this batch; `with_ranges`: its ranges too."""
        if with_ranges:
            self._measure_ranges(name)
        values = _view(self._scope, name)
        if values.size:
            self.statistics.mse_losses.setdefault(name, []).append(mse_search.losses(values))

    def _measure_histogram(self, name: str) -> None:
        values = _view(self._scope, name)
        if values.size == 0 or name not in self.statistics.row_abs_max:
            return
        counts = _histogram(values, self.statistics.histogram_edges(name, self._histogram_bins))
        histograms = self.statistics.histograms
        histograms[name] = counts if name not in histograms else histograms[name] + counts

    def _set_thresholds(self, names: list[str]) -> None:
        """Fill the dictionaries paddle's `_update_program` and `_save_output_threshold` read."""
        statistics = self.statistics
        self._zero_size_var_names = set(statistics.zero_size)
        measured = [name for name in names if name in statistics.row_abs_max]
        if self._algo in HISTOGRAM_ALGOS:
            self._sampling_act_histogram = {
                name: [statistics.histogram(name, self._histogram_bins),
                       statistics.histogram_edges(name, self._histogram_bins)]
                for name in measured}
            self._calculate_kl_hist_threshold()  # weights' abs max too
            return
        self._quantized_threshold = self._weight_thresholds()
        for name in measured:
            if self._algo == "abs_max":
                self._quantized_threshold[name] = statistics.abs_max(name)
            elif self._algo == "mse":
                self._quantized_threshold[name] = mse_search.threshold(statistics.mse_losses[name])
            else:  # avg: the mean over batches of each batch's mean per-sample max |x|, as PaddleSlim takes it
                self._quantized_threshold[name] = np.array(
                    [float(np.mean(rows)) for rows in statistics.row_abs_max[name]]).mean()

    def _weight_thresholds(self) -> dict[str, float | list[float]]:
        """Each weight's max |w|, per output channel for 'channel_wise_abs_max' (as PaddleSlim's sampling takes it)."""
        thresholds: dict[str, float | list[float]] = {}
        for name in self._quantized_weight_var_name:
            weight = np.abs(utils.load_variable_data(self._scope, name))
            if self._weight_quantize_type == "abs_max":
                thresholds[name] = float(weight.max())
                continue
            axis = 1 if self._weight_op_pairs[name] in utils._channelwise_quant_axis1_ops else 0
            channels = np.moveaxis(weight, axis, 0).reshape(weight.shape[axis], -1)
            thresholds[name] = [float(value) for value in channels.max(axis=1)]
        return thresholds
