"""Progress lines for long stages, through the standard `logging` module.

Stages never import Prefect: they log to `quantgate.stages.<stage>`, and the flow routes those
records into the Prefect run's logs (see `quantgate.flows.stage_logs`); outside a flow they go
wherever the caller's logging configuration sends them. Each record carries `progress` (the
stage's name), which `quantgate run` draws as its live progress line (`quantgate.terminal`).
"""

from __future__ import annotations

import logging
import time


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
    """`quantgate.stages.train.loop` -> `train`: the stage a logger belongs to (its own name otherwise)."""
    parts = logger_name.split(".")
    return parts[2] if parts[:2] == ["quantgate", "stages"] and len(parts) > 2 else logger_name


def live(log: logging.Logger, message: str, *args: object) -> None:
    """Log one line that `quantgate run` shows as the stage's live progress line (e.g. a search trial)."""
    log.info(message, *args, extra={"progress": stage_of(log.name)})
