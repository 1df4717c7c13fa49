"""Memory: the machine's budget for a run, batch sizes chosen to fit it, and the peak a stage really used.

A stage never holds more than one batch of its heavy loop at once, so its memory is what it holds anyway (the
model, the runtime's sessions) plus the batch's share; `batches.choose_batch` picks the largest batch whose
estimate fits `budget.memory_budget()`, and refuses (`MemoryRefused`, exit 2) when even one sample cannot.
`peak.PeakMemory` measures what the stage then really used: the peak resident memory of the whole process tree.
"""

from quantgate.memory.batches import (
    BATCHES_KEY,
    BatchChoice,
    MemoryRefused,
    choose_batch,
    choose_batch_in_passes,
    gigabytes,
)
from quantgate.memory.budget import (
    MEMORY_ENV,
    MemoryBudget,
    memory_budget,
    process_memory_bytes,
    return_freed_memory,
    tree_memory_bytes,
)
from quantgate.memory.latency import LATENCY_SETTING, latency_batch_kept, latency_loop
from quantgate.memory.peak import BUDGET_KEY, PEAK_KEY, PeakMemory

__all__ = ["BATCHES_KEY", "BUDGET_KEY", "BatchChoice", "LATENCY_SETTING", "MEMORY_ENV", "MemoryBudget",
           "MemoryRefused", "PEAK_KEY", "PeakMemory", "choose_batch", "choose_batch_in_passes", "gigabytes",
           "latency_batch_kept", "latency_loop", "memory_budget", "process_memory_bytes", "return_freed_memory",
           "tree_memory_bytes"]
