"""Running legacy-format Paddle inference programs (the format PaddleSlim reads and writes)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from quantgate.memory import return_freed_memory


@contextmanager
def static_mode():
    """Switch Paddle to static-graph mode for the block, then back to dynamic graph."""
    was_dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        yield
    finally:
        if was_dynamic:
            paddle.disable_static()


@dataclass(frozen=True)
class LoadedProgram:
    """A saved inference program loaded into its own scope, ready to run."""

    executor: paddle.static.Executor
    scope: paddle.static.Scope
    program: paddle.static.Program
    feeds: list[str]
    fetches: list

    def run(self, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """Outputs on `images`, batch by batch (static mode must be on)."""
        outputs = []
        with paddle.static.scope_guard(self.scope):
            for start in range(0, len(images), batch_size):
                feed = {self.feeds[0]: images[start : start + batch_size]}
                (logits,) = self.executor.run(self.program, feed=feed, fetch_list=self.fetches)
                outputs.append(np.asarray(logits))
        return np.concatenate(outputs)


def release_scope(scope: paddle.static.Scope) -> None:
    """Free every tensor `scope` holds now, and give the freed memory back to the system.

    Dropping the Python scope frees nothing (Paddle keeps the C++ scope), and calibration leaves a whole batch of
    persistable activations in its scope: PP-OCRv4's detector kept 5.6 GB resident after a batch of 4 pages,
    which every later stage of the run (evaluate's runtimes, its latency processes) would have had to fit
    beside. glibc keeps freed heap pages until asked (`malloc_trim`).
    """
    for name in scope.local_var_names():
        var = scope.find_var(name)
        try:
            var.get_tensor()._clear()
        except (AttributeError, RuntimeError, ValueError):  # not a dense tensor (a reader, a tensor array)
            continue
    return_freed_memory()


def load_program(model_prefix: Path) -> LoadedProgram:
    """Load `<prefix>.pdmodel/.pdiparams` into a fresh scope (static mode must be on)."""
    executor = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        program, feeds, fetches = paddle.static.load_inference_model(str(model_prefix), executor)
    return LoadedProgram(executor, scope, program, feeds, fetches)


def persistable_dtypes(program) -> dict[str, str]:
    """Name → dtype of every parameter the program stores (feed/fetch plumbing excluded)."""
    dtypes = {}
    for var in program.list_vars():
        if var.persistable and var.name not in ("feed", "fetch"):
            dtypes[var.name] = str(paddle.base.data_feeder.convert_dtype(var.dtype))
    return dtypes


def op_counts(program) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in program.global_block().ops:
        counts[op.type] = counts.get(op.type, 0) + 1
    return dict(sorted(counts.items()))
