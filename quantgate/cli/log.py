"""`quantgate log`: the audit log of alias moves, oldest first."""

from __future__ import annotations

import argparse
import json

from quantgate.cli.shared import MODEL_PICK_HELP, add_json_option, add_model_option, add_store_option, store_and_model


def register(commands) -> None:
    parser = commands.add_parser("log", help="show the audit log of alias moves")
    add_json_option(parser, help="print JSON lines for scripts")
    add_model_option(parser, help=MODEL_PICK_HELP)
    add_store_option(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    store, model = store_and_model(args)
    for entry in store.audit_log(model):
        if args.json:
            print(json.dumps(entry, sort_keys=True))
        else:
            print(f"{entry.get('at')}  {entry.get('who')}  {entry.get('alias')}: {entry.get('from') or 'none'} -> "
                  f"{entry.get('to')}  [{entry.get('action')}] {entry.get('why')}")
    return 0
