"""What `quantgate run` shows: quantgate's own lines on the terminal, every library's output in a log file.

Paddle's C++ logging (glog), paddle2onnx's `[Paddle2ONNX]` lines, PaddleSlim's progress bars and
the Prefect server write to the process's file descriptors 1 and 2, not through Python, so they
are captured at the descriptor level (`captured_output`): the child processes a stage starts
inherit the capture too. quantgate's own lines reach the terminal through copies of the original
descriptors, taken before the capture, by a logging handler on the `quantgate` logger that passes
only the records meant for the user: stage starts and ends (`quantgate.run`) and progress lines
(records with `progress` set, see `quantgate.progress`).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

RUN_LOGGER = "quantgate.run"  # stage starts and ends, and the version line: always for the user
VERBOSE_ENV = "QUANTGATE_VERBOSE"  # set by `quantgate run --verbose`: stages leave library output alone


def verbose() -> bool:
    """Whether library output should stay on the terminal (`--verbose`) instead of being captured."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


@contextmanager
def captured_output(log_file: Path) -> Iterator[Path]:
    """Send everything written to file descriptors 1 and 2 (this process and its children) to `log_file`."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = (os.dup(1), os.dup(2))
    target = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield log_file
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in (*saved, target):
            os.close(descriptor)


def readable(raw: str) -> str:
    """Captured text as a terminal would have left it: progress bars redrawn with '\\r' keep their last state."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in raw.splitlines())


@dataclass
class Terminal:
    """quantgate's lines for the user: results on stdout, the run's stage and progress lines on stderr.

    A live line (progress) is redrawn in place when stderr is a TTY. The descriptors are copies taken
    before the capture began; None once it ended, when plain sys.stdout / sys.stderr are the terminal again.
    """

    out: int | None
    err: int | None
    log_file: Path | None = None
    tty: bool = False
    _live: bool = field(default=False, repr=False)

    def print(self, line: str = "") -> None:
        """A result line (the summary), on stdout."""
        self._end_live()
        self._write(self.out, sys.stdout, line + "\n")

    def note(self, line: str) -> None:
        """A line about the run's progress (a stage started or ended), on stderr."""
        self._end_live()
        self._write(self.err, sys.stderr, line + "\n")

    def live(self, line: str) -> None:
        """A progress line that the next one replaces (on a TTY; elsewhere it is a line of its own)."""
        if not self.tty or self.err is None:
            self.note(line)
            return
        self._end_live()
        self._write(self.err, sys.stderr, line[: self._width() - 1])
        self._live = True

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self.err).columns or 120  # a pseudo-terminal may report 0 columns
        except OSError:
            return 120

    def _end_live(self) -> None:
        if self._live:
            self._write(self.err, sys.stderr, "\r\x1b[K")
            self._live = False

    @staticmethod
    def _write(descriptor: int | None, stream, text: str) -> None:
        if descriptor is None:
            stream.write(text)
            stream.flush()
        else:
            os.write(descriptor, text.encode("utf-8", "replace"))


class TerminalHandler(logging.Handler):
    """Shows the records meant for the user: `quantgate.run` lines, and progress records as a live line."""

    def __init__(self, terminal: Terminal):
        super().__init__(logging.INFO)
        self.terminal = terminal

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stage = getattr(record, "progress", None)
            if stage is not None:
                message = record.getMessage()  # "train epoch 3/12: ..." already names its stage
                self.terminal.live(f"  {message}" if message.startswith(stage) else f"  {stage:<9} {message}")
            elif record.name == RUN_LOGGER or record.name.startswith(RUN_LOGGER + "."):
                if getattr(record, "live", False):
                    self.terminal.live(record.getMessage())
                else:
                    self.terminal.note(record.getMessage())
        except Exception:  # noqa: BLE001 - a closed terminal must not break the run
            self.handleError(record)


@contextmanager
def quiet_terminal(verbose_run: bool = False) -> Iterator[Terminal]:
    """Around a pipeline run: quantgate's lines on the terminal, the rest in `terminal.log_file` (unless verbose).

    With `verbose_run`, nothing is captured and the stages leave library output on the terminal too.
    The caller owns `log_file` once this ends (keep it in the version's run.log, or name it).
    """
    run_logger = logging.getLogger("quantgate")
    previous_level = run_logger.level
    if previous_level == logging.NOTSET or previous_level > logging.INFO:
        run_logger.setLevel(logging.INFO)
    terminal = Terminal(os.dup(1), os.dup(2))
    terminal.tty = os.isatty(terminal.err)
    handler = TerminalHandler(terminal)
    run_logger.addHandler(handler)
    previous_env = os.environ.get(VERBOSE_ENV)
    try:
        if verbose_run:
            os.environ[VERBOSE_ENV] = "1"
            yield terminal
        else:
            os.environ.pop(VERBOSE_ENV, None)
            descriptor, name = tempfile.mkstemp(prefix="quantgate-run-", suffix=".log")
            os.close(descriptor)
            terminal.log_file = Path(name)
            with captured_output(terminal.log_file):
                yield terminal
    finally:
        if not verbose_run:  # Prefect's goodbye at exit ("Stopping temporary server") is not for the terminal
            logging.getLogger("prefect").setLevel(logging.WARNING)
        terminal._end_live()
        run_logger.removeHandler(handler)
        run_logger.setLevel(previous_level)
        for descriptor in (terminal.out, terminal.err):
            os.close(descriptor)
        terminal.out = terminal.err = None
        if previous_env is None:
            os.environ.pop(VERBOSE_ENV, None)
        else:
            os.environ[VERBOSE_ENV] = previous_env
