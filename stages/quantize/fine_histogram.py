"""One pass over an activation for everything 'hist' and 'KL' calibration need: ranges and a histogram.

PaddleSlim bins |x| into 2048 uniform bins over [min |x|, max |x|], so it needs the range before it can bin,
and runs every calibration batch through the network twice. Here one pass counts |x| into bins fixed in
advance: the top bits of its float32 pattern (sign dropped), `FINE_BITS` of them. That is a histogram of
constant *relative* width, 2**-MANTISSA_BITS of a value (0.2 %). Once the range is known, `uniform_histogram`
spreads each fine bin's count evenly over its width and reads PaddleSlim's 2048 bins off the cumulative count:
a bin of PaddleSlim's gets the counts it would have had, give or take the values of the fine bins it cuts.

The kernel is compiled by numba (no GIL: the calibration measures two tensors at a time).
"""

from __future__ import annotations

import numba
import numpy as np

MANTISSA_BITS = 9  # of float32's 23: each fine bin is 2**-9 of its values wide
SHIFT = 23 - MANTISSA_BITS
FINE_BINS = 1 << (31 - SHIFT)  # the sign bit dropped: every finite |x|, and inf/nan at the top


@numba.njit(nogil=True, cache=False)
def _one_pass(rows: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, float]:  # pragma: no cover (compiled)
    samples, size = rows.shape
    bits = rows.view(np.uint32)
    row_abs_max = np.empty(samples, np.float32)
    smallest = np.float32(np.inf)
    for sample in range(samples):
        largest = np.float32(0.0)
        for i in range(size):
            magnitude = abs(rows[sample, i])
            largest = max(largest, magnitude)
            smallest = min(smallest, magnitude)
            counts[(bits[sample, i] & np.uint32(0x7FFFFFFF)) >> SHIFT] += 1
        row_abs_max[sample] = largest
    return row_abs_max, smallest


def measure(values: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, float, np.ndarray]:
    """(each sample's max |x|, the smallest |x|, `counts` with `values` added): sample = first axis.

    `counts`: the fine histogram so far (FINE_BINS int64), or None to start one.
    """
    rows = np.ascontiguousarray(values, dtype=np.float32).reshape(values.shape[0] if values.ndim else 1, -1)
    counts = np.zeros(FINE_BINS, np.int64) if counts is None else counts
    row_abs_max, smallest = _one_pass(rows, counts)
    return row_abs_max, float(smallest), counts


def fine_edges(first: int, stop: int) -> np.ndarray:
    """The float values where fine bins first..stop-1 begin, and where the last one ends (float64)."""
    patterns = (np.arange(first, stop + 1, dtype=np.uint64) << SHIFT).astype(np.uint32)
    return patterns.view(np.float32).astype(np.float64)


def uniform_histogram(counts: np.ndarray, first: int, abs_min: float, abs_max: float,
                      edges: np.ndarray) -> np.ndarray:
    """PaddleSlim's histogram over `edges` (uniform, float64), read off fine `counts` that begin at bin `first`.

    Each fine bin's count is taken as spread evenly over its part of [abs_min, abs_max]; the cumulative count
    at each of `edges` is interpolated and the bins are its differences (float64; they sum to the count).
    """
    total = float(counts.sum())
    if abs_max <= abs_min:  # one value: numpy puts it in the bin its edge opens
        histogram = np.zeros(len(edges) - 1)
        histogram[min(np.searchsorted(edges, abs_min, side="right") - 1, len(histogram) - 1)] = total
        return histogram
    bounds = np.clip(fine_edges(first, first + len(counts)), abs_min, abs_max)
    cumulative = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)])
    at_edges = np.interp(edges, bounds, cumulative)
    at_edges[-1] = total  # the last edge closes the last bin, max |x| included
    return np.diff(at_edges)


def trimmed(counts: np.ndarray) -> tuple[int, np.ndarray]:
    """(first non-empty bin, the counts from it to the last non-empty one): what is worth saving."""
    filled = np.flatnonzero(counts)
    if not filled.size:
        return 0, counts[:0].copy()
    return int(filled[0]), counts[filled[0]: filled[-1] + 1].copy()
