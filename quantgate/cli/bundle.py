"""`quantgate bundle [VERSION|ALIAS] --out DIR`: a passed version as a folder that runs without the store (an OCR
system's version: with every component's models and records).

Exit codes: 0 written, 1 the version's gate did not pass (nothing written, as `promote` refuses),
2 bad input (unknown version or alias, an --out that is not new or empty, a damaged version).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantgate.artifacts import RELEASE
from quantgate.cli.shared import (
    MODEL_PICK_HELP,
    BadTarget,
    add_model_option,
    add_store_option,
    finished_version,
    store_and_model,
)


def register(commands) -> None:
    parser = commands.add_parser("bundle", help="write a passed version into a self-contained deployment folder")
    parser.add_argument("target", nargs="?", default=RELEASE, metavar="VERSION",
                        help=f"version (e.g. v3) or alias to bundle (default: {RELEASE})")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to create (it must not exist, or be empty)")
    add_model_option(parser, help=MODEL_PICK_HELP)
    add_store_option(parser)
    parser.set_defaults(func=handle)


def resolve_target(store, model: str, target: str):
    """The finished version `target` names: a version such as v3, or an alias such as release.

    Raises:
        BadTarget: no such version, an alias that is not set or cannot be read, or a run that did not finish.
    """
    from quantgate.artifacts import ArtifactError, InvalidName
    from quantgate.artifacts.names import check_version

    try:
        check_version(target)
    except InvalidName:
        if model not in store.models():
            raise BadTarget(f"store {store.location} holds no model {model!r} (it holds "
                            f"{', '.join(store.models()) or 'none'}); name one with --model") from None
        try:
            version = store.alias(model, target)
        except (InvalidName, ArtifactError) as exc:
            raise BadTarget(f"{target!r} is neither a version (v1, v2, ...) nor a readable alias of {model}: {exc}") \
                from exc
        if version is None:
            raise BadTarget(f"alias {target!r} of {model} is not set; name a version (`quantgate versions` lists "
                            "them) or an alias that is set")
        target = version
    return finished_version(store, model, target)


def handle(args: argparse.Namespace) -> int:
    """Write the bundle and say where it is and how to check it.

    Raises:
        BadTarget: unknown model, version or alias, or a run that did not finish.
        NotPassed: the version's gate did not pass (exit 1); nothing is written.
        OutputExists, CannotBundle: see quantgate.bundle.write_bundle.
    """
    from quantgate.bundle import write_bundle
    from quantgate.bundle.layout import BUNDLE_FILE, MODEL_CARD_MD, OCR_SYSTEM, SYSTEM_COMPONENTS, TEXT_DETECTION

    store, model = store_and_model(args)
    ref = resolve_target(store, model, args.target)
    result = write_bundle(store, ref, args.out)
    bundle = result.bundle
    files = bundle.manifest["files"]
    print(f"bundle {bundle.label} -> {bundle.root} ({result.sources.verdict})")
    if "components" in bundle.manifest:  # an OCR system: each component's version and models
        for role in SYSTEM_COMPONENTS:
            entry = bundle.manifest["components"].get(role)
            if entry is None:
                continue
            sizes = "  ".join(f"{precision} {files[path]['bytes'] / 1024:.1f} KiB"
                              for precision, path in entry["models"].items())
            print(f"  {role:<17} {entry['model']}/{entry['version']}  {sizes}")
        print(f"  {'runtimes':<17} {', '.join(bundle.manifest['runtimes'])}")
    else:
        for runtime, forms in bundle.manifest["runtimes"].items():
            sizes = "  ".join(f"{precision} {sum(files[path]['bytes'] for path in paths) / 1024:.1f} KiB"
                              for precision, paths in forms.items())
            print(f"  {runtime:<17} {sizes}")
    if "characters" in bundle.manifest:  # a text recognizer: the dictionary its lines are decoded with
        print(f"  {'dictionary':<17} {bundle.root / bundle.manifest['characters']} "
              f"({len(bundle.characters())} characters + the CTC blank)")
    inputs = "PAGE" if bundle.task in (TEXT_DETECTION, OCR_SYSTEM) else "IMAGE"
    print(f"  {'model card':<17} {bundle.root / MODEL_CARD_MD}")
    print(f"  {'manifest':<17} {bundle.root / BUNDLE_FILE} ({len(files)} files with sha256)")
    print(f"  {'check it':<17} quantgate predict {bundle.root} {inputs}...")
    return 0
