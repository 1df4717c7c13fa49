"""`quantgate config`: the configuration schema as a commented YAML example, or a file resolved against it."""

from __future__ import annotations

import argparse
from pathlib import Path

from quantgate.cli.shared import add_set_option
from quantgate.config import validate_config
from quantgate.config_files import apply_override, read_yaml


def register(commands) -> None:
    parser = commands.add_parser("config", help="print the configuration schema as a commented YAML example")
    parser.add_argument("--example", action="store_true",
                        help="print every field with its description and default (the default action)")
    parser.add_argument("--config", type=Path, help="print this YAML file resolved against the defaults instead")
    add_set_option(parser, help="apply an override before printing (repeatable)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Print the YAML; exit 2 (ConfigError, listing every bad field) if the file or an override is invalid."""
    from quantgate.config_example import example_yaml

    raw = read_yaml(args.config) if args.config else {}
    for assignment in args.overrides:
        apply_override(raw, assignment)
    print(example_yaml(validate_config(raw)), end="")
    return 0
