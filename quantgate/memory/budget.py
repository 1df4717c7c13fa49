"""The memory budget of a run: the machine's (or the worker's) setting, never the model's.

`QUANTGATE_MEMORY_GB` (the CLI's `--memory-gb` sets it; a Prefect worker sets it in its environment) is the
resident memory, in GB, that one run's process tree may use. Unset, it is 30 % of what this process may use:
its cgroup's limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) when one is set, else the machine's total
memory. A fraction of the limit, never of momentary free memory: free memory changes from run to run on a shared
machine, and the same settings must choose the same batches on the same machine. The other 70 % are left to
what shares the machine with a run (the Prefect server, another worker, the page cache of the images read) and
to what no estimate sees exactly (allocator slack, a runtime's own caches).

The budget is recorded in every stage manifest that chose a batch, and kept out of the stages' reuse digests:
a result that does not depend on the batch does not depend on the budget.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import psutil

from quantgate.errors import BadInput

MEMORY_ENV = "QUANTGATE_MEMORY_GB"
DEFAULT_FRACTION = 0.3
GB = 1e9
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63
STATUS = Path("/proc/self/status")


class BadMemoryBudget(BadInput):
    """QUANTGATE_MEMORY_GB (or --memory-gb) is not a positive number of GB."""


@dataclass(frozen=True)
class MemoryBudget:
    bytes: int
    source: str  # where it came from, for the record: the setting, or the limit it is a fraction of

    def record(self) -> dict:
        return {"budget_gb": round(self.bytes / GB, 3), "budget_source": self.source}


def machine_memory() -> tuple[int, str]:
    """What this process may use: its cgroup's memory limit when one is set and below the machine's memory,
    else the machine's total memory; and which of the two it is."""
    total = psutil.virtual_memory().total
    for path in CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < min(total, NO_LIMIT):
            return int(text), f"cgroup limit {int(text) / GB:.1f} GB"
    return total, f"machine memory {total / GB:.1f} GB"


def memory_budget(environ: dict | None = None) -> MemoryBudget:
    """This run's budget: QUANTGATE_MEMORY_GB when set, else 30 % of `machine_memory()`.

    Raises:
        BadMemoryBudget: the variable is set to something other than a positive number.
    """
    value = (os.environ if environ is None else environ).get(MEMORY_ENV, "").strip()
    if value:
        try:
            gigabytes = float(value)
        except ValueError:
            gigabytes = float("nan")
        if not gigabytes > 0 or gigabytes == float("inf"):
            raise BadMemoryBudget(f"{MEMORY_ENV}={value!r} is not a positive number of GB; set it to the memory one "
                                  "run may use (e.g. 8), or unset it for 30 % of this machine's")
        return MemoryBudget(int(gigabytes * GB), f"{MEMORY_ENV}={value}")
    limit, what = machine_memory()
    return MemoryBudget(int(limit * DEFAULT_FRACTION), f"30 % of the {what}")


def process_memory_bytes(process: psutil.Process) -> int:
    """`process`'s resident memory with each page it shares counted in proportion (PSS): summed over a tree, a
    forked DataLoader worker's copy-on-write pages count once, as the kernel counts them, not once per process
    (RSS would: a detector run's two workers each showed the 1.4 GB of the parent they were forked from). RSS
    where the kernel will not tell (another user's process, no smaps_rollup)."""
    try:
        return process.memory_full_info().pss
    except (psutil.AccessDenied, AttributeError):
        return process.memory_info().rss


def tree_memory_bytes(process: psutil.Process | None = None) -> int:
    """The resident memory of `process` (this one by default) and all its descendants now, shared pages counted
    once (`process_memory_bytes`); a process that ends while it is read counts as nothing."""
    process = process or psutil.Process()
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.Error:  # it ended
        return 0
    total = 0
    for member in members:
        try:
            total += process_memory_bytes(member)
        except psutil.Error:
            pass
    return total


def status_bytes(field: str) -> int | None:
    """A size this process's /proc/self/status reports (VmRSS, VmHWM), in bytes; None where /proc has none."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


@lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library); looked up once: find_library runs ldconfig."""
    library = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(library), "malloc_trim", None) if library is not None else None


def return_freed_memory() -> None:
    """Give the heap pages this process has freed back to the system (glibc keeps them until asked): what a stage
    freed then no longer counts against the next one's budget."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
