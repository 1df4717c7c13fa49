"""Measuring what a batch costs, in a fresh child process: the estimate that cannot mislead.

Paddle's and onnxruntime's allocators keep what they grew to, and the parent has already grown: measured there,
a second batch size would look free. Nor can one process measure two batch sizes: what the first batch grew is
not all reused by the second (Paddle's allocator and oneDNN's caches keep chunks per shape), and PP-OCRv4's
detector then seemed to cost 0.52 GB a page where it costs 0.29. So each batch size runs in a new process
(`python -m <module>`) that loads the model, runs one batch (twice: STEADY_RUNS) and reports its high-water mark
(VmHWM); the difference between two sizes is what the extra samples cost, and what the smaller needed beyond that and the
interpreter is what the model holds whatever the batch. The probing module supplies the loop (`run_probe`); this
one supplies both ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from quantgate.errors import QuantgateError
from quantgate.lifetime import dies_with_us
from quantgate.memory.budget import status_bytes

PROBE_BATCHES = (1, 3)  # small, so the probe fits where the loop will; 3, not 2: an allocator that grows by
# doubling could hold a second sample in what the first one grew to


# A loop runs its batch again and again, and the second run is the one that costs: onnxruntime plans the memory
# of a shape on its first run and allocates the plan as one block from the second on, beside what the first
# run's arena kept (PP-OCRv4's detector in FP32: 0.16 GB a page after one run, 0.30 GB after two).
STEADY_RUNS = 2


class ProbeFailed(QuantgateError):
    """The probing process failed: the batch cannot be sized (its error output is included)."""

    killed = False  # a signal ended the process (the kernel's OOM killer sends SIGKILL)


@dataclass(frozen=True)
class Probe:
    fixed_bytes: int  # what loading and running the model holds beyond the interpreter, whatever the batch
    per_sample_bytes: int
    batches: tuple[int, int]
    interpreter_bytes: int = 0  # the probing process before it loaded the model: what another such process costs

    @property
    def measured_by(self) -> str:
        return f"probed at batches {self.batches[0]} and {self.batches[1]} in a child process"


def run_probe(load: Callable[[], object], run_at: Callable[[object, int], None], batch: int) -> None:
    """The child's side, after its imports: `load()` the model, `run_at(model, batch)`, and print the process's
    resident memory before loading and its high-water mark after the batch, as JSON on stdout."""
    interpreter = status_bytes("VmRSS") or 0  # the imports: the parent has them already
    model = load()
    for _ in range(STEADY_RUNS):
        run_at(model, batch)
    print(json.dumps({"interpreter": interpreter, "mark": status_bytes("VmHWM") or 0}))


def probe(module: str, arguments: list[str], batches: tuple[int, int] = PROBE_BATCHES) -> Probe:
    """Run `python -m module *arguments --batch b` for both `batches` and read their marks as fixed and per-sample
    bytes.

    Raises:
        ProbeFailed: a process failed (e.g. killed for memory at the probe's own small batches).
    """
    small, large = batches
    (small_mark, interpreter), (large_mark, _) = (probe_one(module, arguments, batch) for batch in batches)
    per_sample = max(0, large_mark - small_mark) // (large - small)
    return Probe(max(0, small_mark - small * per_sample - interpreter), per_sample, batches, interpreter)


def probe_one(module: str, arguments: list[str], batch: int) -> tuple[int, int]:
    """(high-water mark, interpreter's share) of `python -m module *arguments --batch batch`, in bytes.

    Raises:
        ProbeFailed: the process failed; `.killed` when a signal ended it (the kernel's OOM killer sends SIGKILL).
    """
    command = [sys.executable, "-m", module, *arguments, "--batch", str(batch)]
    done = subprocess.run(dies_with_us(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        error = ProbeFailed(f"measuring the memory of a batch of {batch} ({module}) failed with exit "
                            f"{done.returncode}; set the batch size yourself to go on. Its error output:\n"
                            f"{done.stderr[-2000:]}")
        error.killed = done.returncode < 0
        raise error
    record = json.loads(done.stdout.strip().splitlines()[-1])
    return int(record["mark"]), int(record["interpreter"])
