"""The latency batch: timed at a fixed batch whatever the budget, so it is refused, never lowered, where it does not
fit. One wording for the evaluate stage, which sizes it from the models it times, and for the check before a run,
which sizes it from the model it was given (`quantgate.int8.latency_memory`)."""

from __future__ import annotations

from quantgate.memory.batches import BatchChoice, MemoryRefused, gigabytes
from quantgate.memory.budget import MEMORY_ENV

LATENCY_SETTING = "evaluate.latency_batch_size"


def latency_loop(runtime: str) -> str:
    """The name of `runtime`'s latency loop in the records and messages: "evaluate latency in onnxruntime"."""
    return f"evaluate latency in {runtime}"


def latency_batch_kept(choice: BatchChoice) -> BatchChoice:
    """`choice`, the batch of a latency loop sized with requested=ceiling=the latency batch, when it kept that batch.

    Raises:
        MemoryRefused: the batch had to be lowered: a speed measured at another batch would not compare with the
            policy's; the message names the batch, the budget and both fixes.
    """
    if not choice.lowered:
        return choice
    needed = choice.fixed_bytes + choice.requested * choice.per_sample_bytes
    raise MemoryRefused(
        f"{choice.loop}: {LATENCY_SETTING}={choice.requested} needs about {gigabytes(needed)}, over the memory budget "
        f"of {gigabytes(choice.budget.bytes)} ({choice.budget.source}); latency is timed at a fixed batch so that "
        f"speed-ups compare: lower {LATENCY_SETTING} (the batch fits up to {choice.batch_size}) or raise the budget "
        f"({MEMORY_ENV} or --memory-gb); nothing was run")
