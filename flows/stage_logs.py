"""Route the stages' `logging` records into the Prefect run's logs.

Stages log progress (epochs, calibration batches) with the standard `logging` module under
`quantgate.stages` and never import Prefect. While a stage task runs, Prefect's own API log
handler is attached to that logger, so the lines are stored with the task run (and shown by
`prefect flow-run logs` and the UI) as well as printed on the console, as any Prefect log is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prefect.logging.handlers import APILogHandler

STAGE_LOGGER = "quantgate.stages"


@contextmanager
def stage_logs_to_prefect(level: int = logging.INFO) -> Iterator[None]:
    """Send `quantgate.stages.*` records at `level` and above to the current run's logs while inside."""
    logger = logging.getLogger(STAGE_LOGGER)
    handler = APILogHandler(level=level)
    previous_level = logger.level
    if previous_level == logging.NOTSET or previous_level > level:
        logger.setLevel(level)  # otherwise the root's WARNING would drop progress lines before any handler
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
