"""What several `quantgate` commands share: their options, declared once, and opening the store.

Commands add options with the `add_*` helpers so a flag keeps one name, one destination and one
help text everywhere; `open_store`, `store_and_model` and `finished_version` turn the options into
store objects and raise `NoStore` or `BadTarget` (exit 2) with the fix when they name nothing usable.
Only `quantgate run` creates a store; every other command refuses a path that holds none.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quantgate.errors import BadInput, QuantgateError
from quantgate.settings import STORE_ENV, resolve_store_root

STORE_HELP = f"artifact store: a folder, or s3://BUCKET/PREFIX (default: ${STORE_ENV} or ~/.quantgate/store)"
MODEL_FILTER_HELP = "only this model"
MODEL_PICK_HELP = "model name (default: the store's only model)"
REASON_HELP = "why; recorded in the audit log"
# The version record's statuses with a gate decision behind them (written by flows/release.py).
FINISHED = ("passed", "failed")


class BadTarget(BadInput):
    """The model or version named on the command line cannot be used."""


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help=STORE_HELP)


def add_model_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """`--model`; `help` is MODEL_FILTER_HELP (listings) or MODEL_PICK_HELP (commands on one model)."""
    parser.add_argument("--model", help=help)


def add_set_option(parser: argparse.ArgumentParser, *, help: str, metavar: str = "KEY=VALUE") -> None:
    """`--set KEY=VALUE`, repeatable, collected in `args.overrides`."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar=metavar, help=help)


def add_json_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    parser.add_argument("--json", action="store_true", help=help)


def add_reason_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", default="", help=REASON_HELP)


class NoStore(BadInput):
    """`--store` (or its default) names no artifact store; a command that only reads or moves creates none."""


def open_store(args: argparse.Namespace):
    """The existing ArtifactStore that `--store` (or its defaults) names; only `quantgate run` creates one.

    Raises:
        NoStore: the folder is missing, or holds things but no model's versions (a mistyped path).
    """
    from quantgate.artifacts import open_store  # not at import time: `quantgate run` validates its config first

    root = resolve_store_root(args.store)
    check_is_store(root)
    return open_store(root)


def check_is_store(root: Path | str) -> None:
    """Refuse a path that is not a store, before ArtifactStore() would create it (a typo must create nothing).

    An s3:// store is checked by opening it: a missing bucket is refused there, and nothing is created.

    A store is a folder that is empty (made, nothing run yet) or holds `<model>/versions/` folders
    or the search cache; anything else (a home folder, a dataset) is a path that was meant elsewhere.

    Raises:
        NoStore: naming the path and the fix.
    """
    if isinstance(root, str):
        return
    fix = f"pass --store DIR naming the folder `quantgate run` stored its versions in, or set {STORE_ENV}"
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise NoStore(f"no artifact store at {root}: the path {what}; {fix}. Nothing was created")
    from quantgate.artifacts.versions import foreign_entries  # the store's reading of its layout, read-only

    entries = foreign_entries(root)
    if not entries:
        return
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    raise NoStore(f"{root} is not an artifact store: it holds {shown} but no model's versions; {fix}")


def store_and_model(args: argparse.Namespace):
    """The store and the model to act on: `--model`, or the store's only model.

    Raises:
        BadTarget: no `--model` and the store holds no model or several.
    """
    store = open_store(args)
    if args.model:
        return store, args.model
    models = store.models()
    if len(models) != 1:
        raise BadTarget(f"store {store.root} holds {len(models)} models ({', '.join(models) or 'none'}); "
                        "name one with --model")
    return store, models[0]


def finished_version(store, model: str, version: str):
    """The VersionRef of `model`'s `version`, which must have finished with a gate decision.

    Raises:
        BadTarget: the version does not exist, its name is invalid, or it did not finish.
    """
    from quantgate.artifacts import ArtifactNotFound, InvalidName

    try:
        ref = store.version(model, version)
    except (ArtifactNotFound, InvalidName) as exc:
        raise BadTarget(str(exc)) from exc
    status = store.version_record(ref).get("status", "incomplete")
    if status not in FINISHED:
        raise BadTarget(f"{model}/{version} has status {status!r}; only a finished run (passed or failed) "
                        "has a gate decision")
    return ref


def report_error(exc: QuantgateError) -> None:
    """One line on stderr (plus the notes the error collected on its way), as the exit code's explanation."""
    notes = "".join(f"\n  {note}" for note in getattr(exc, "__notes__", []))
    print(f"quantgate: {exc}{notes}", file=sys.stderr)
