"""PaddleSlim's 'mse' calibration, its candidates scored in one compiled pass over each activation.

For every calibration batch and activation, PaddleSlim tries the scales s·max|x| of that batch for s = 0.30,
0.32, ..., 1.00 (36 of them), quantizes the tensor with each (int8, symmetric, its ONNX format), and keeps the
scale whose mean squared error is the lowest seen so far over all batches. It does that with 36 numpy passes of
six temporaries each: on PP-OCRv4's recognizer, 160 s per batch of 32 lines. `losses` scores the same 36
candidates in one pass, in cache-sized chunks, with the same float32 arithmetic per element (the squared errors
of a chunk are summed in float32, the chunks in float64): 6x faster than numpy's passes on 2 M values, the losses
within 1e-7 of numpy's (relative); on the recognizer one calibration on 256 lines took 108 s instead of 1,317 s,
its program byte-identical. The losses depend only on the model and the batch, so `Statistics` keeps them and
every recipe with `algo: mse` reuses them; `threshold` applies PaddleSlim's rule to them.
"""

from __future__ import annotations

import numba
import numpy as np

BINS = 127  # 2 ** (activation_bits - 1) - 1 for 8-bit activations
CHUNK = 4096  # elements scored against every candidate at a time: 16 KiB of float32 stays in L1


def candidate_fractions() -> np.ndarray:
    """PaddleSlim's s, accumulated as its loop accumulates it (0.3 + 0.02 + ... while s <= 1.0)."""
    fractions, s = [], 0.3
    while s <= 1.0:
        fractions.append(s)
        s += 0.02
    return np.array(fractions)


FRACTIONS = candidate_fractions()


@numba.njit(nogil=True, cache=False, fastmath={"reassoc"})
def _losses(values: np.ndarray, fractions: np.ndarray) -> tuple[np.ndarray, float]:  # pragma: no cover (compiled)
    size = values.size
    abs_max = np.float32(0.0)
    for i in range(size):
        abs_max = max(abs_max, abs(values[i]))
    largest = 1e-8 if abs_max == 0.0 else float(abs_max)
    sums = np.zeros(fractions.size)
    for start in range(0, size, CHUNK):
        stop = min(start + CHUNK, size)
        for k in range(fractions.size):
            scale = np.float32(fractions[k] * largest)
            total = np.float32(0.0)  # a chunk's sum in float32 vectorizes; the chunks add up in float64
            for i in range(start, stop):
                x = values[i]
                q = np.float32(np.rint(np.float32(x / scale) * np.float32(BINS)))
                q = min(max(q, np.float32(-BINS - 1)), np.float32(BINS))
                error = x - np.float32(np.float32(q / np.float32(BINS)) * scale)
                total += error * error
            sums[k] += total
    return sums / max(size, 1), largest


def losses(values: np.ndarray) -> tuple[np.ndarray, float]:
    """(the mean squared error of each candidate scale, the batch's max |x|) of one activation batch."""
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    return _losses(flat, FRACTIONS)


def threshold(batches: list[tuple[np.ndarray, float]]) -> float:
    """PaddleSlim's pick over the batches' (losses, max |x|), in batch order: the scale of the lowest loss,
    a later one winning a tie."""
    best_loss, best_scale = np.inf, 0.0
    for batch_losses, largest in batches:
        for fraction, loss in zip(FRACTIONS, batch_losses):
            if loss <= best_loss:
                best_loss, best_scale = loss, fraction * largest
    return float(best_scale)
