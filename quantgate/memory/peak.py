"""The peak resident memory of this process's whole tree during a block: what a stage really used.

A stage's memory is not only its own process's: DataLoader workers, the latency child processes, a training
launcher's ranks all count against the machine, so the peak is taken over the process tree (this process and
every descendant). Three measurements, of which the peak is the largest:

- a daemon thread sums the resident memory over the tree every `SAMPLE_INTERVAL_S`, a page shared by several of
  its processes (a forked worker's copy-on-write pages) counted once (PSS, `budget.process_memory_bytes`).
  Between two samples a spike can be missed, hence the two exact marks below;
- this process's own high-water mark (VmHWM), exact: reset on entry by writing "5" to /proc/self/clear_refs
  (Linux 4.0 and later) so that it covers the block only, read from /proc/self/status on exit. Where the reset is
  refused (another OS, a locked-down /proc) the mark covers the process's whole life and `own_mark_reset` says so;
- the largest high-water mark of the children that ended during the block (getrusage's RUSAGE_CHILDREN, which
  Linux carries up from grandchildren a child waited for), counted only when it grew during the block: a child
  that lived shorter than one sample interval is still seen, if it held more than any child before it did.

The cgroup's `memory.peak` is not used: it counts every process of the cgroup and the page cache, not this tree.
"""

from __future__ import annotations

import resource
import sys
import threading
from pathlib import Path

import psutil

from quantgate.memory.budget import GB, status_bytes, tree_memory_bytes

PEAK_KEY = "peak_rss_gb"  # a stage's metrics: the peak resident memory of its process tree, GB (1e9 bytes)
BUDGET_KEY = "memory_budget"  # a stage's metrics: the budget it ran under, `MemoryBudget.record()`
SAMPLE_INTERVAL_S = 0.25  # a PSS read walks a process's pages: at 0.05 s it cost the digits run 5 % of its wall time
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_HIGH_WATER_MARK = "5"  # proc(5): "5" resets the peak RSS (VmHWM) to the current RSS

_active: list[PeakMemory] = []  # open blocks, outermost first: a nested block's reset must not lose theirs
_active_lock = threading.Lock()


def own_high_water_mark_bytes() -> int | None:
    """This process's peak RSS since it started or since the last reset (VmHWM); None where /proc has none."""
    return status_bytes("VmHWM")


def _children_high_water_mark_bytes() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, kB on Linux


def _reset_own_high_water_mark() -> bool:
    try:
        CLEAR_REFS.write_text(RESET_HIGH_WATER_MARK)
        return True
    except OSError:
        return False


class PeakMemory:
    """`with PeakMemory() as peak: ...` then `peak.bytes` (or `peak.gigabytes()`): the peak resident memory of
    this process's tree during the block. See the module docstring for how it is measured.

    Concurrent blocks in one process (two stages in two threads) each see the whole tree, the other's memory
    included: memory is a property of the process, not of a thread.
    """

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S):
        self.interval_s = interval_s
        self.sampled_bytes = 0
        self.own_bytes: int | None = None
        self.children_bytes = 0
        self.own_mark_reset = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._children_before = 0

    @property
    def bytes(self) -> int:
        return max(self.sampled_bytes, self.own_bytes or 0, self.children_bytes)

    def gigabytes(self) -> float:
        """The peak in GB (1e9 bytes), as recorded under PEAK_KEY."""
        return round(self.bytes / GB, 3)

    def __enter__(self) -> PeakMemory:
        with _active_lock:
            before = own_high_water_mark_bytes()
            for outer in _active:  # their exact mark would end at this reset: keep what it had reached
                outer.own_bytes = max(outer.own_bytes or 0, before or 0)
            self.own_mark_reset = _reset_own_high_water_mark()
            _active.append(self)
        self._children_before = _children_high_water_mark_bytes()
        self.sampled_bytes = tree_memory_bytes()
        self._thread = threading.Thread(target=self._sample, name="quantgate-peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> bool:
        self._stop.set()
        self._thread.join()
        self.sampled_bytes = max(self.sampled_bytes, tree_memory_bytes())
        with _active_lock:
            self.own_bytes = max(self.own_bytes or 0, own_high_water_mark_bytes() or 0) or None
            _active.remove(self)
        children = _children_high_water_mark_bytes()
        self.children_bytes = children if children > self._children_before else 0
        return False

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.interval_s):
            self.sampled_bytes = max(self.sampled_bytes, tree_memory_bytes(me))
