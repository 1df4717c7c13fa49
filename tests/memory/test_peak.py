"""PeakMemory sees what the whole process tree held during its block, and only during its block."""

from __future__ import annotations

import mmap
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

import numpy as np
import psutil
import pytest

from quantgate.memory import PEAK_KEY, PeakMemory, tree_memory_bytes
from quantgate.memory.peak import CLEAR_REFS, own_high_water_mark_bytes

ALLOCATED = 300_000_000  # bytes a child touches: far above the interpreter's own ~30 MB and the test's noise

# A python that holds ALLOCATED bytes of touched pages for `hold_s` seconds, then exits.
HOLDER = textwrap.dedent("""
    import sys, time
    import numpy as np
    block = np.ones({size} // 8, dtype=np.float64)  # np.ones writes every page: resident, not just reserved
    time.sleep(float(sys.argv[1]))
""").format(size=ALLOCATED)

# A python that starts the holder as its own child and waits for it: the holder is a grandchild of the test.
PARENT = textwrap.dedent("""
    import subprocess, sys
    subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], check=True)
""")


def baseline_bytes() -> int:
    return tree_memory_bytes()


def own_rss_bytes() -> int:
    return psutil.Process().memory_info().rss


@contextmanager
def pages_held_here(size: int = ALLOCATED, hold_s: float = 0.0):
    """`size` bytes of fresh pages in this process, touched, held `hold_s` seconds, returned to the OS on exit.
    Mapped directly: memory from malloc may reuse pages an earlier test freed but the allocator kept."""
    block = mmap.mmap(-1, size)
    np.frombuffer(block, dtype=np.uint8)[::mmap.PAGESIZE] = 1  # one write per page makes it resident
    time.sleep(hold_s)
    try:
        yield
    finally:
        block.close()


def test_a_child_holding_memory_counts_in_the_peak():
    before = baseline_bytes()
    with PeakMemory() as peak:
        subprocess.run([sys.executable, "-c", HOLDER, "0.5"], check=True)
    assert peak.bytes >= before + 0.9 * ALLOCATED
    assert peak.sampled_bytes >= before + 0.9 * ALLOCATED  # seen by the tree's sampling, not only by rusage


def test_a_grandchild_holding_memory_counts_in_the_peak():
    before = baseline_bytes()
    with PeakMemory() as peak:
        subprocess.run([sys.executable, "-c", PARENT, HOLDER, "0.5"], check=True)
    assert peak.sampled_bytes >= before + 0.9 * ALLOCATED


def test_a_child_shorter_than_one_sample_still_counts():
    # In a fresh interpreter: the children's high-water mark only ever grows, so in this process an earlier
    # test's child of the same size would hide this one.
    measure = textwrap.dedent("""
        import subprocess, sys
        from quantgate.memory import PeakMemory
        with PeakMemory(interval_s=60.0) as peak:  # no sample falls inside the child's life
            subprocess.run([sys.executable, "-c", sys.argv[1], "0"], check=True)
        print(peak.children_bytes, peak.bytes)
    """)
    done = subprocess.run([sys.executable, "-c", measure, HOLDER], check=True, capture_output=True, text=True)
    children, peak = (int(word) for word in done.stdout.split())
    assert children >= 0.9 * ALLOCATED and peak >= children


def test_this_process_allocating_counts_in_the_peak():
    before = own_rss_bytes()  # the tree may hold others (a Prefect server the session started)
    with PeakMemory(interval_s=60.0) as peak, pages_held_here():  # only the exact high-water mark can see it
        pass
    if own_high_water_mark_bytes() is None:
        pytest.skip("no /proc/self/status VmHWM on this system")
    assert peak.own_bytes >= before + 0.9 * ALLOCATED


def test_a_second_block_counts_only_its_own_memory():
    with PeakMemory() as first, pages_held_here(hold_s=0.3):  # long enough for the sampler to see it
        pass
    with PeakMemory() as second:
        pass
    assert second.sampled_bytes < first.sampled_bytes - 0.8 * ALLOCATED  # the sampler starts from now, on any OS
    if not second.own_mark_reset:
        pytest.skip(f"{CLEAR_REFS} is not writable here: this process's exact peak covers its whole life")
    assert second.own_bytes < first.own_bytes - 0.8 * ALLOCATED


def test_a_nested_block_does_not_erase_the_outer_peak():
    with PeakMemory(interval_s=60.0) as outer:
        with pages_held_here():
            pass
        with PeakMemory(interval_s=60.0) as inner:
            pass
    if not inner.own_mark_reset:
        pytest.skip(f"{CLEAR_REFS} is not writable here: no reset, nothing to erase")
    assert outer.own_bytes >= inner.own_bytes + 0.8 * ALLOCATED


def test_the_peak_is_recorded_in_gigabytes():
    with PeakMemory() as peak:
        pass
    assert PEAK_KEY == "peak_rss_gb"
    assert peak.gigabytes() == round(peak.bytes / 1e9, 3) and peak.gigabytes() > 0
