"""Where a stage's lines go: its own `logging` records to the Prefect run, library output to run.log.

Stages log progress (epochs, calibration batches, search trials) with the standard `logging`
module under `quantgate.stages` (the libraries they call under `quantgate.<library>`) and never import
Prefect. While a stage task runs, Prefect's own API log handler is attached to those loggers, so the
lines are stored with the task run (and shown by `prefect flow-run logs` and the UI).

What the libraries a stage drives print on file descriptors 1 and 2 (Paddle's C++ logging,
paddle2onnx, PaddleSlim's progress bars, warnings) is captured while the stage runs and then
appended to the version's `run.log` and sent to the Prefect run's logs, never left on the terminal
(unless `quantgate run --verbose`, see `quantgate.terminal`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.logging.handlers import APILogHandler

from quantgate.artifacts import ArtifactError, ArtifactStore, VersionRef
from quantgate.layers import WORK_LOGGERS
from quantgate.progress import running_stage
from quantgate.terminal import RUN_LOGGER, captured_output, readable, verbose

LIBRARY_LOGGER = "quantgate.library"  # captured library output, for the Prefect run's logs only
PREFECT_CHUNK_CHARS = 50_000  # one Prefect log record per chunk: far below its 1 MB record limit

run_lines = logging.getLogger(RUN_LOGGER)


@contextmanager
def stage_logs_to_prefect(level: int = logging.INFO) -> Iterator[None]:
    """Send the stages' and libraries' records (`WORK_LOGGERS`) at `level` and above to the current run's logs
    while inside."""
    handler = APILogHandler(level=level)
    loggers = [logging.getLogger(name) for name in WORK_LOGGERS]
    previous_levels = [logger.level for logger in loggers]
    for logger, previous_level in zip(loggers, previous_levels):
        if previous_level == logging.NOTSET or previous_level > level:
            logger.setLevel(level)  # otherwise the root's WARNING would drop progress lines before any handler
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, previous_level in zip(loggers, previous_levels):
            logger.removeHandler(handler)
            logger.setLevel(previous_level)


@contextmanager
def stage_lines(stage: str) -> Iterator[dict]:
    """The user's line for a stage as it starts and as it ends (or fails), with its wall time.

    Yields a dict whose "note" (e.g. "reused from v2 (inputs digest …)") the caller may set for the closing line.
    """
    run_lines.info("  %s: running", stage, extra={"live": True})
    started, outcome = time.perf_counter(), {"note": ""}
    try:
        with running_stage(stage):
            yield outcome
    except BaseException:
        run_lines.info("  %s: FAILED after %.2f s", stage, time.perf_counter() - started)
        raise
    # "train: computed in 13.81 s" or "data: reused from v1 (inputs digest …) in 0.01 s"
    run_lines.info("  %s: %s in %.2f s", stage, outcome["note"] or "computed", time.perf_counter() - started)


@contextmanager
def library_output(store: ArtifactStore, version: VersionRef, stage: str) -> Iterator[None]:
    """Capture what libraries print during a stage; append it to the version's run.log and the Prefect run.

    With `--verbose` (QUANTGATE_VERBOSE) nothing is captured: it stays on the terminal.
    """
    if verbose():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="quantgate-stage-") as scratch:
        log_file = Path(scratch) / f"{stage}.log"
        try:
            with captured_output(log_file):
                yield
        finally:
            text = readable(log_file.read_text(encoding="utf-8", errors="replace")) if log_file.exists() else ""
            if text.strip():
                _keep(store, version, stage, text)


def _keep(store: ArtifactStore, version: VersionRef, stage: str, text: str) -> None:
    header = f"===== {stage}: library output =====\n"
    try:
        store.append_run_log(version, header + text + "\n")
    except ArtifactError as exc:  # the log is informational: a full disk must not hide the stage's own error
        run_lines.warning("  %-9s library output not kept in run.log: %s", stage, exc)
    logger = logging.getLogger(LIBRARY_LOGGER)
    logger.propagate = False  # never to the console: that is what the capture is for
    handler = APILogHandler(level=logging.INFO)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        for start in range(0, len(text), PREFECT_CHUNK_CHARS):
            logger.info("%s library output:\n%s", stage, text[start:start + PREFECT_CHUNK_CHARS])
    finally:
        logger.removeHandler(handler)
