"""Which operators ran in float16/bfloat16 and which stayed float32, from Paddle's own counters.

`paddle.amp.debugging.enable_operator_stats_collection()` makes Paddle count every operator
call by the dtype it ran in; `disable_operator_stats_collection()` only prints those counts as
a table. The numbers come from `paddle.base.core.get_low_precision_op_list()`, the same call
the disable function makes, so they are read from there as data instead of parsing stdout.
The counters also run on CPU, where they show what AMP did there: every operator float32.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import paddle

COLUMNS = ("float16", "bfloat16", "float32", "other")  # the order of Paddle's "fp16,bf16,fp32,other"


def _parse(raw: dict) -> dict[str, dict[str, int]]:
    ops = {}
    for op_type, value in sorted((raw or {}).items()):
        counts = value if isinstance(value, list) else str(value).split(",")
        ops[op_type] = {column: int(count) for column, count in zip(COLUMNS, counts)}
    return ops


@contextlib.contextmanager
def operator_stats() -> Iterator[dict[str, dict[str, int]]]:
    """Count operator calls by dtype inside the block; the yielded dict is filled when the block ends."""
    ops: dict[str, dict[str, int]] = {}
    paddle.amp.debugging.enable_operator_stats_collection()
    try:
        yield ops
    finally:
        ops.update(_parse(paddle.base.core.get_low_precision_op_list()))
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the same counts as a table
            paddle.amp.debugging.disable_operator_stats_collection()


def op_precision_record(ops: dict[str, dict[str, int]], amp_effective: bool, reason: str, device: str,
                        task_black_list: tuple[str, ...] = ()) -> dict:
    """The op_precision.json record: per-op call counts, which ops ran low precision, AMP's verdict, and the
    ops the task put on the black list (e.g. the CTC loss, `warpctc`)."""
    low = sorted(op for op, counts in ops.items() if counts["float16"] or counts["bfloat16"])
    calls = {column: sum(counts[column] for counts in ops.values()) for column in COLUMNS}
    return {
        "source": "paddle.amp.debugging operator stats, forward operators of the first training step of this run",
        "device": device,
        "amp_effective": amp_effective,
        "reason": reason,
        "ops": ops,
        "low_precision_ops": low,
        "float32_only_ops": sorted(op for op, counts in ops.items()
                                   if counts["float32"] and op not in low),
        "calls": calls,
        "task_black_list": sorted(task_black_list),
    }
