"""The batch a loop runs at: the largest that fits the memory budget, or the user's when it fits.

A loop's memory at batch b is estimated as `fixed + b * per_sample` bytes: `fixed` is what it holds whatever
the batch (this process before the loop, the model's weights, each runtime session's own), `per_sample` what one
more sample adds (its input, the activations the loop keeps or the runtime plans for, its outputs). Where both
come from is the caller's (an estimate from shapes, or a probe measuring two batches in a child process); this
module only decides, and says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from quantgate.errors import BadInput
from quantgate.memory.budget import GB, MEMORY_ENV, MemoryBudget

log = logging.getLogger(__name__)

BATCHES_KEY = "batch_choices"  # a stage's metrics: {loop: BatchChoice.record()} for each loop whose batch it chose


class MemoryRefused(BadInput):
    """Even one sample cannot fit the memory budget: refused before the loop (exit 2), naming what changes it."""


def gigabytes(size: float) -> str:
    return f"{size / GB:.2f} GB"


@dataclass(frozen=True)
class BatchChoice:
    loop: str  # what runs at this batch, e.g. "calibration", "evaluate accuracy pass"
    batch_size: int
    requested: int | None  # the user's setting; None: chosen for this machine
    ceiling: int  # the largest batch chosen without a setting (beyond it a batch gains nothing)
    fixed_bytes: int
    per_sample_bytes: int
    budget: MemoryBudget
    measured_by: str  # how the bytes were found: "shapes" (an estimate) or "probe at batches 1 and 4"
    reason: str

    @property
    def estimated_bytes(self) -> int:
        return self.fixed_bytes + self.batch_size * self.per_sample_bytes

    @property
    def lowered(self) -> bool:
        return self.requested is not None and self.batch_size < self.requested

    def record(self) -> dict:
        return {"batch_size": self.batch_size, "requested": self.requested, "ceiling": self.ceiling,
                "estimated_gb": round(self.estimated_bytes / GB, 3), "fixed_gb": round(self.fixed_bytes / GB, 3),
                "per_sample_mb": round(self.per_sample_bytes / 1e6, 3), "measured_by": self.measured_by,
                "reason": self.reason, **self.budget.record()}


def choose_batch(loop: str, *, fixed_bytes: int, per_sample_bytes: int, budget: MemoryBudget,
                 requested: int | None, ceiling: int, setting: str, subject: str, measured_by: str = "shapes",
                 changes: str = "make one sample smaller (data.transforms)") -> BatchChoice:
    """The batch for `loop`: `requested` when it fits `budget`, else lowered to what fits (logged with the
    reason); without a request the largest that fits, up to `ceiling`.

    `setting` names the config field of this batch (e.g. "quantize.batch_size"), `subject` what runs (the model and
    its input shape), `changes` what else the user can do about it (an imperative clause).

    Raises:
        MemoryRefused: even one sample does not fit.
    """
    per_sample = max(int(per_sample_bytes), 1)
    fits = (budget.bytes - int(fixed_bytes)) // per_sample
    if fits < 1:
        raise MemoryRefused(
            f"{loop}: {subject} needs about {gigabytes(fixed_bytes + per_sample)} at batch 1 "
            f"({gigabytes(fixed_bytes)} held whatever the batch + {gigabytes(per_sample)} per sample, {measured_by}), "
            f"over the memory budget of {gigabytes(budget.bytes)} ({budget.source}). Raise the budget "
            f"({MEMORY_ENV} or --memory-gb) on a machine that has the memory, or {changes}; nothing was run")
    if requested is not None:
        if requested <= fits:
            return BatchChoice(loop, requested, requested, ceiling, fixed_bytes, per_sample, budget, measured_by,
                               f"{setting}={requested} fits the budget")
        reason = (f"{setting}={requested} lowered to {fits}: {requested} samples would need about "
                  f"{gigabytes(fixed_bytes + requested * per_sample)}, over the budget of {gigabytes(budget.bytes)} "
                  f"({budget.source})")
        log.warning("%s: %s", loop, reason)
        return BatchChoice(loop, int(fits), requested, ceiling, fixed_bytes, per_sample, budget, measured_by, reason)
    size = int(min(ceiling, fits))
    reason = (f"the largest batch up to {ceiling} that fits the budget of {gigabytes(budget.bytes)}" if size == ceiling
              else f"the largest batch that fits the budget of {gigabytes(budget.bytes)} ({budget.source})")
    return BatchChoice(loop, size, None, ceiling, fixed_bytes, per_sample, budget, measured_by, reason)
