"""Progress lines for long stages, through the standard `logging` module.

Stages never import Prefect: they log to `quantgate.stages.<stage>` (and the libraries they call to
`quantgate.<library>`), and the flow routes those records into the Prefect run's logs (see
`quantgate.flows.stage_logs`); outside a flow they go wherever the caller's logging configuration sends
them. Each record carries `progress` (the stage's name), which `quantgate run` draws as its live
progress line (`quantgate.terminal`); a library's line names the stage that runs it (`running_stage`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_running: ContextVar[str | None] = ContextVar("quantgate_running_stage", default=None)


@contextmanager
def running_stage(stage: str) -> Iterator[None]:
    """While inside, a library's progress lines name `stage` (the flow sets it around each stage)."""
    token = _running.set(stage)
    try:
        yield
    finally:
        _running.reset(token)


class Progress:
    """Logs `what i/total` for the first and last step, and for steps at least `every_s` seconds apart."""

    def __init__(self, log: logging.Logger, what: str, total: int, every_s: float = 0.0):
        self.log = log
        self.what = what
        self.total = total
        self.every_s = every_s
        self.started = time.perf_counter()
        self.stage = stage_of(log.name)
        self.last_logged: float | None = None

    def step(self, done: int, detail: str = "") -> None:
        now = time.perf_counter()
        due = self.last_logged is None or done >= self.total or now - self.last_logged >= self.every_s
        if not due:
            return
        self.last_logged = now
        suffix = f": {detail}" if detail else ""
        self.log.info("%s %d/%d%s (%.1f s)", self.what, done, self.total, suffix, now - self.started,
                      extra={"progress": self.stage})


def stage_of(logger_name: str) -> str:
    """`quantgate.stages.train.loop` -> `train`: the stage a logger belongs to; for a library's logger the stage
    running it (its own name outside a stage)."""
    parts = logger_name.split(".")
    if parts[:2] == ["quantgate", "stages"] and len(parts) > 2:
        return parts[2]
    return _running.get() or logger_name


def live(log: logging.Logger, message: str, *args: object) -> None:
    """Log one line that `quantgate run` shows as the stage's live progress line (e.g. a search trial)."""
    log.info(message, *args, extra={"progress": stage_of(log.name)})
