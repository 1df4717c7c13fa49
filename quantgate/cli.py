"""The `quantgate` command: run the release flow and look at the versions it made.

Exit codes: 0 released (or listed), 1 the release gate failed, 2 bad input, 3 the pipeline broke.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from quantgate import release_commands
from quantgate.config import ConfigError, PipelineConfig, apply_override, read_yaml, validate_config
from quantgate.errors import QuantgateError
from quantgate.fsck_command import add_parser as add_fsck_parser
from quantgate.fsck_command import command_fsck
from quantgate.settings import STORE_ENV, resolve_store_root
from quantgate.stages import PIPELINE
from quantgate.stages.gate.decision import Criterion

# Convenience flags for the settings people change most; --set reaches every other field.
SHORTCUTS = {
    "model_name": "model_name",
    "epochs": "train.epochs",
    "learning_rate": "train.learning_rate",
    "architecture": "train.architecture",
    "nproc": "train.nproc",
    "amp_level": "train.amp.level",
    "amp_dtype": "train.amp.dtype",
    "max_accuracy_drop": "gate.max_accuracy_drop",
    "min_agreement": "gate.min_agreement",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quantgate", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train, quantize and gate a new version")
    run.add_argument("--config", type=Path, help="YAML file with settings (see quantgate/config.py)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override one setting, e.g. --set train.amp.level=O2 (repeatable)")
    run.add_argument("--store", help=f"artifact store root (default: ${STORE_ENV} or ~/.quantgate/store)")
    run.add_argument("--resume", metavar="VERSION",
                     help="continue training from the latest checkpoint of VERSION (e.g. v3) into a new version; "
                          "same settings except a higher train.epochs")
    run.add_argument("--no-reuse", dest="reuse", action="store_false",
                     help="recompute every stage, even those an earlier run computed from the same inputs")
    for flag, key in SHORTCUTS.items():
        run.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar="VALUE", help=f"same as --set {key}=VALUE")

    config = commands.add_parser("config", help="print the configuration schema as a commented YAML example")
    config.add_argument("--example", action="store_true",
                        help="print every field with its description and default (the default action)")
    config.add_argument("--config", type=Path, help="print this YAML file resolved against the defaults instead")
    config.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="apply an override before printing (repeatable)")

    versions = commands.add_parser("versions", help="list versions with their gate results and aliases")
    versions.add_argument("--store", help=f"artifact store root (default: ${STORE_ENV} or ~/.quantgate/store)")
    versions.add_argument("--model", help="only this model")
    versions.add_argument("--json", action="store_true", help="print JSON for scripts")
    release_commands.add_parsers(commands)  # gate, promote, rollback, log
    add_fsck_parser(commands)
    return parser


def resolve_config(args: argparse.Namespace) -> PipelineConfig:
    """YAML file, then --set overrides, then shortcut flags; validated as one schema."""
    raw = read_yaml(args.config) if args.config else {}
    for assignment in args.overrides:
        apply_override(raw, assignment)
    for flag, key in SHORTCUTS.items():
        value = getattr(args, flag)
        if value is not None:
            apply_override(raw, f"{key}={value}")
    return validate_config(raw)


def print_summary(info, store_root: Path, wall_seconds: float) -> None:
    record = info.record
    print(f"\nquantgate {info.model}/{info.version}: gate {record['status'].upper()}  ({wall_seconds:.1f} s)")
    seconds = record.get("stage_seconds", {})
    reused = record.get("reused", {})
    for stage in (stage for stage in PIPELINE if stage in seconds):
        note = f"  (reused from {reused[stage]})" if stage in reused else ""
        print(f"  {stage:<9} {seconds[stage]:8.2f} s{note}")
    metrics = record.get("metrics")
    if metrics:
        print(f"  top-1     FP32 {metrics['fp32_top1_pct']:.2f} %   INT8 {metrics['int8_top1_pct']:.2f} %   "
              f"delta {metrics['accuracy_delta_pts']:+.2f} pts   agreement {metrics['agreement']:.4f}")
        print(f"  latency   FP32 {metrics['latency_ms_p50_fp32']:.3f} ms   INT8 {metrics['latency_ms_p50_int8']:.3f} ms"
              "   (onnxruntime, median per batch)")
    amp = record.get("amp")
    if amp:
        requested = amp["requested"]
        print(f"  AMP       requested {requested['level']}/{requested['dtype']}, effective: {amp['effective']} "
              f"({amp['reason']})")
    scaler = record.get("scaler")
    if scaler:
        print(f"  scaler    loss scale {scaler['initial_scale']:g} -> {scaler['final_scale']:g} "
              f"(min {scaler['min_scale']:g}), skipped {scaler['skipped_steps']} of {scaler['steps']} steps "
              f"(limit {scaler['max_skipped_ratio']:.0%}){'' if scaler['scaler_enabled'] else ', scaler disabled'}")
    search = record.get("search")
    if search:
        layers = ", ".join(search["float_layers"]) or "none"
        print(f"  search    {'passed' if search['passed'] else 'NOTHING PASSED'} on validation: kept trial "
              f"{search['kept_trial']} of {search['trials']} ({search['recipe']['algo']}), FP32 layers: {layers}, "
              f"drop {search['validation']['accuracy_drop_pts']:+.2f} pts, {search['wall_s']:.1f} s; {search['stopped']}")
    for criterion in record.get("gate", {}).get("criteria", []):
        print(f"  gate      {Criterion(**criterion).describe()}")
    if record.get("error"):
        print(f"  error     {record['error']}")
    print(f"  aliases   {', '.join(info.aliases) or 'none'}")
    print(f"  stored in {Path(store_root) / info.model / 'versions' / info.version}")


def command_run(args: argparse.Namespace) -> int:
    config = resolve_config(args)
    store_root = resolve_store_root(args.store)
    from quantgate.artifacts import ArtifactStore  # imported after validation: fail fast, before Paddle loads

    store = ArtifactStore(store_root)  # refuses an unwritable root before any training
    if args.resume:
        check_resume(store, config, args.resume)
    from quantgate.flows.prefect_api import check_prefect_api

    check_prefect_api()  # an unreachable PREFECT_API_URL: exit 3 naming the setting, before a version exists
    from quantgate.flows.release import release

    started = time.perf_counter()
    failure: QuantgateError | None = None
    try:
        version = release(config=config, store=str(store_root), resume=args.resume, reuse=args.reuse)
    except QuantgateError as exc:  # GateFailed names its version; other errors carry a note saying where
        version, failure = getattr(exc, "version", None), exc
    if version:
        info = next(info for info in store.versions(config.model_name) if info.version == version)
        print_summary(info, store.root, time.perf_counter() - started)
    if failure is not None:
        report_error(failure)
        return failure.exit_code
    return 0


def check_resume(store, config: PipelineConfig, version: str) -> None:
    """Refuse --resume before a new version exists: unknown version, no checkpoint, or other settings.

    Raises:
        ConfigError: the version or its checkpoint cannot continue this run.
        ArtifactCorrupt: the checkpoint's bytes changed since it was written.
    """
    from quantgate.artifacts import ArtifactNotFound, InvalidName
    from quantgate.stages.train.checkpoint_state import read_state, resume_problems

    try:
        ref = store.latest_checkpoint(store.version(config.model_name, version), "train")
    except (ArtifactNotFound, InvalidName) as exc:
        raise ConfigError([f"--resume {version}: {exc}"]) from exc
    problems = resume_problems(read_state(store.verify_checkpoint(ref)), config.train)
    if problems:
        raise ConfigError([f"--resume {version} (checkpoint {ref.name}): {problem}" for problem in problems])


def command_config(args: argparse.Namespace) -> int:
    from quantgate.config_example import example_yaml

    raw = read_yaml(args.config) if args.config else {}
    for assignment in args.overrides:
        apply_override(raw, assignment)
    print(example_yaml(validate_config(raw)), end="")
    return 0


def command_versions(args: argparse.Namespace) -> int:
    from quantgate.artifacts import ArtifactStore

    store = ArtifactStore(resolve_store_root(args.store))
    infos = store.versions(args.model)
    if args.json:
        print(json.dumps([
            {"model": i.model, "version": i.version, "status": i.status, "aliases": list(i.aliases),
             "metrics": i.record.get("metrics", {}), "gate": i.record.get("gate", {})}
            for i in infos
        ], indent=2, sort_keys=True))
        return 0
    print(f"{'model':<16} {'version':<8} {'status':<10} {'fp32 %':>7} {'int8 %':>7} {'delta':>7}  aliases")
    for info in infos:
        metrics = info.record.get("metrics", {})
        numbers = [f"{metrics[key]:.2f}" if key in metrics else "-"
                   for key in ("fp32_top1_pct", "int8_top1_pct", "accuracy_delta_pts")]
        print(f"{info.model:<16} {info.version:<8} {info.status:<10} {numbers[0]:>7} {numbers[1]:>7} {numbers[2]:>7}"
              f"  {', '.join(info.aliases)}")
    return 0


def report_error(exc: QuantgateError) -> None:
    notes = "".join(f"\n  {note}" for note in getattr(exc, "__notes__", []))
    print(f"quantgate: {exc}{notes}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    # The embedded Prefect server would try to send usage telemetry; a CLI run stays offline.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Its first start creates the database; Prefect's 20 s default is too short on a busy machine.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    args = build_parser().parse_args(argv)
    handlers = {"run": command_run, "config": command_config, "versions": command_versions, "fsck": command_fsck,
                **release_commands.HANDLERS}
    try:
        return handlers[args.command](args)
    except QuantgateError as exc:
        report_error(exc)
        return exc.exit_code
    except Exception:  # noqa: BLE001 - anything unforeseen is "broke" (3), never "gate failed" (1) to a CI job
        traceback.print_exc()
        print("quantgate: the command broke with the error above (exit 3). "
              "Run `quantgate fsck` to check the store, and report the traceback.", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
