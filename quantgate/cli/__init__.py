"""The `quantgate` command: run the release flow and look at the versions it made.

Exit codes: 0 released (or listed), 1 the release gate failed, 2 bad input, 3 the pipeline broke.

One module per command; each has `register(commands)`, which adds its sub-parser and sets
`func` to its `handle(args) -> int`. Options several commands take are declared in `shared.py`.
A command reports a problem by raising a `QuantgateError`; `main` turns it into its exit code. Any
other exception exits 3 with one line that names a file holding its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback

from quantgate.cli import bundle, config, crops, demo, fsck, gate, log, predict, promote, rollback, run, versions
from quantgate.cli.shared import report_error
from quantgate.errors import EXIT_BROKE, QuantgateError, clipped

# In the order `quantgate --help` lists them.
COMMANDS = (run, config, versions, gate, promote, rollback, bundle, predict, log, fsck, demo, crops)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quantgate", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # The embedded Prefect server would try to send usage telemetry; a CLI run stays offline.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Its first start creates the database; Prefect's 20 s default is too short on a busy machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except QuantgateError as exc:
        report_error(exc)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything unforeseen is "broke" (3), never "gate failed" (1) to a CI job
        report_crash(exc, sys.argv[1:] if argv is None else argv, verbose=getattr(args, "verbose", False))
        return EXIT_BROKE


def report_crash(exc: Exception, argv: list[str], verbose: bool = False) -> None:
    """One line on stderr naming the error and a file holding its traceback (the traceback too with --verbose).

    The terminal is for the user: a traceback is for the report, so it goes to a file under the system's
    temporary folder; if that cannot be written, it is printed after all, so it is never lost.
    """
    details = traceback.format_exc()
    if verbose:
        print(details, end="", file=sys.stderr)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    try:
        fd, path = tempfile.mkstemp(prefix=f"quantgate-crash-{stamp}-{os.getpid()}-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as log:
            log.write(f"quantgate {' '.join(argv)}\n{details}")
        where = f"the traceback is in {path}"
    except OSError as log_failed:
        if not verbose:
            print(details, end="", file=sys.stderr)
        where = f"the traceback is above (it could not be written to a file: {log_failed})"
    summary = clipped(f"{type(exc).__name__}: {exc}", 300)
    print(f"quantgate: the command broke ({summary}); {where}. "
          "Run quantgate fsck to check the store, and report the traceback.", file=sys.stderr)
