"""`quantgate versions`: every version with its gate result, headline numbers and aliases."""

from __future__ import annotations

import argparse
import json

from quantgate.cli.shared import MODEL_FILTER_HELP, add_json_option, add_model_option, add_store_option, open_store


def register(commands) -> None:
    parser = commands.add_parser("versions", help="list versions with their gate results and aliases")
    add_store_option(parser)
    add_model_option(parser, help=MODEL_FILTER_HELP)
    add_json_option(parser, help="print JSON for scripts")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    infos = open_store(args).versions(args.model)
    if args.json:
        print(json.dumps([
            {"model": i.model, "version": i.version, "status": i.status, "aliases": list(i.aliases),
             "metrics": i.record.get("metrics", {}), "gate": i.record.get("gate", {}),
             "runtimes": i.record.get("runtimes", {}),
             "trained_here": not (i.record.get("source") or i.record.get("system")),
             **({"system": i.record["system"]} if i.record.get("system") else {})}
            for i in infos
        ], indent=2, sort_keys=True))
        return 0
    # Not at the top: the stage package loads Paddle, which a JSON listing for scripts does not need.
    from quantgate.stages.evaluate.outputs import ACCURACY_DELTA, FP32_TOP1, INT8_TOP1

    print(f"{'model':<16} {'version':<8} {'status':<10} {'fp32 %':>7} {'int8 %':>7} {'delta':>7}  aliases")
    for info in infos:
        metrics = info.record.get("metrics", {})
        numbers = [f"{metrics[key]:.2f}" if key in metrics else "-" for key in (FP32_TOP1, INT8_TOP1, ACCURACY_DELTA)]
        print(f"{info.model:<16} {info.version:<8} {info.status:<10} {numbers[0]:>7} {numbers[1]:>7} {numbers[2]:>7}"
              f"  {', '.join(info.aliases)}")
        source = info.record.get("source")
        if source:  # say it: the numbers are of a model quantgate did not train
            print(f"{'':<16} {'':<8} trained elsewhere: {(source.get('origin') or {}).get('path')}")
        system = info.record.get("system")
        if system:  # an OCR system: the stored versions it is made of
            print(f"{'':<16} {'':<8} system of: " + " + ".join(f"{part['model']}/{part['version']}"
                                                            for part in system.values() if part))
        runtimes = info.record.get("runtimes") or {}
        if len(runtimes) > 1:  # every listed runtime must pass: show which did, side by side
            cells = " | ".join(runtime_cell(name, entry) for name, entry in runtimes.items())
            print(f"{'':<16} {'':<8} runtimes: {cells}")
    return 0


def runtime_cell(runtime: str, entry: dict) -> str:
    """One runtime's verdict with its INT8 top-1 and speed-up, e.g. 'openvino passed 96.90 % 2.10x'."""
    from quantgate.stages.evaluate.outputs import INT8_TOP1, SPEEDUP

    def shown(key: str, spec: str) -> str:
        value = entry.get(key)
        return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

    verdict = "passed" if entry.get("passed") else "FAILED"
    return f"{runtime} {verdict} {shown(INT8_TOP1, '.2f')} % {shown(SPEEDUP, '.2f')}x"
