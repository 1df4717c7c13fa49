"""The `quantgate` command: run the release flow and look at the versions it made.

Exit codes: 0 released (or listed), 1 the release gate failed, 2 bad input, 3 the pipeline broke.

One module per command; each has `register(commands)`, which adds its sub-parser and sets
`func` to its `handle(args) -> int`. Options several commands take are declared in `shared.py`.
A command reports a problem by raising a `QuantgateError`; `main` turns it into its exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from quantgate.cli import config, fsck, gate, log, promote, rollback, run, versions
from quantgate.cli.shared import report_error
from quantgate.errors import EXIT_BROKE, QuantgateError

# In the order `quantgate --help` lists them.
COMMANDS = (run, config, versions, gate, promote, rollback, log, fsck)


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
    except Exception:  # noqa: BLE001 - anything unforeseen is "broke" (3), never "gate failed" (1) to a CI job
        traceback.print_exc()
        print("quantgate: the command broke with the error above (exit 3). "
              "Run `quantgate fsck` to check the store, and report the traceback.", file=sys.stderr)
        return EXIT_BROKE
