"""The batch a loop runs at: the largest that fits the memory budget, or the user's when it fits.

A loop's memory at batch b is estimated as `fixed + b * per_sample` bytes: `fixed` is what it holds whatever
the batch (this process before the loop, the model's weights, each runtime session's own), `per_sample` what one
more sample adds (its input, the activations the loop keeps or the runtime plans for, its outputs). Where both
come from is the caller's (an estimate from shapes, or a probe measuring two batches in a child process); this
module only decides, and says why.
"""

from __future__ import annotations

import dataclasses
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
    passes: int = 1  # passes over the data, each holding its share of what a sample keeps (`choose_batch_in_passes`)
    origin: str | None = None  # where a requested batch came from when the user did not set it (a task's default)

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
                "reason": self.reason, "passes": self.passes, **self.budget.record(),
                **({"origin": self.origin} if self.origin else {})}


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


def choose_batch_in_passes(loop: str, *, fixed_bytes: int, per_sample_bytes: int, split_bytes: int, max_passes: int,
                           budget: MemoryBudget, requested: int | None, ceiling: int, setting: str, subject: str,
                           measured_by: str = "shapes", what_splits: str = "what it keeps",
                           changes: str = "make one sample smaller (data.transforms)") -> BatchChoice:
    """`choose_batch` for a loop that can run as several passes over the same data, each pass keeping a share of
    `split_bytes` (part of `per_sample_bytes`) and running everything else again: one pass whenever batch 1 fits
    in one, else the fewest passes (up to `max_passes`) in which it does, at the largest batch that fits them.
    A pass costs a pass's time, so passes are never traded for a larger batch.

    Raises:
        MemoryRefused: even one sample does not fit in `max_passes` passes.
    """
    split_bytes = min(max(int(split_bytes), 0), int(per_sample_bytes))
    settings = dict(budget=budget, requested=requested, ceiling=ceiling, setting=setting, subject=subject,
                    changes=changes)
    most = max(max_passes, 1)
    passes = next((count for count in range(1, most + 1)
                   if fixed_bytes + _per_pass(per_sample_bytes, split_bytes, count) <= budget.bytes), None)
    if passes is None:  # refused with one pass's numbers, saying what the most passes would still need
        least = fixed_bytes + _per_pass(per_sample_bytes, split_bytes, most)
        also = f"; in {most} passes over the data still {gigabytes(least)}" if most > 1 else ""
        return choose_batch(loop, fixed_bytes=fixed_bytes, per_sample_bytes=per_sample_bytes,
                            measured_by=measured_by + also, **settings)
    choice = choose_batch(loop, fixed_bytes=fixed_bytes, per_sample_bytes=_per_pass(per_sample_bytes, split_bytes,
                                                                                  passes),
                          measured_by=measured_by, **settings)
    if passes == 1:
        return choice
    reason = (f"one sample needs about {gigabytes(fixed_bytes + per_sample_bytes)} in one pass, over the budget "
              f"of {gigabytes(budget.bytes)} ({budget.source}): {what_splits} are split over {passes} passes "
              f"over the data; {choice.reason}")
    log.warning("%s: %s", loop, reason)
    return dataclasses.replace(choice, reason=reason, passes=passes)


def _per_pass(per_sample_bytes: int, split_bytes: int, passes: int) -> int:
    return int(per_sample_bytes) - split_bytes + -(-split_bytes // passes)
