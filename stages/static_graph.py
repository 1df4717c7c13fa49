"""Running legacy-format Paddle inference programs (the format PaddleSlim reads and writes)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import paddle


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


def load_program(model_prefix: Path):
    """Load `<prefix>.pdmodel/.pdiparams` into a fresh scope: (executor, scope, program, feeds, fetches)."""
    executor = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        program, feeds, fetches = paddle.static.load_inference_model(str(model_prefix), executor)
    return executor, scope, program, feeds, fetches


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


def run_program(model_prefix: Path, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Outputs of a saved inference program on `images`, batch by batch (static mode must be on)."""
    executor, scope, program, feeds, fetches = load_program(model_prefix)
    outputs = []
    with paddle.static.scope_guard(scope):
        for start in range(0, len(images), batch_size):
            (logits,) = executor.run(program, feed={feeds[0]: images[start : start + batch_size]}, fetch_list=fetches)
            outputs.append(np.asarray(logits))
    return np.concatenate(outputs)
