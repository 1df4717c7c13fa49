"""`quantgate run`: train, quantize and gate a new version, then print its summary.

Exit codes: 0 released, 1 the release gate failed, 2 bad input, 3 the pipeline broke.
The configuration is validated before the store, Prefect or Paddle is imported, so a bad
setting fails in about a second and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import textwrap
import time
from pathlib import Path

from quantgate.cli.shared import add_set_option, add_store_option, report_error
from quantgate.config import ConfigError, PipelineConfig, validate_config
from quantgate.config_files import apply_override, read_yaml
from quantgate.errors import QuantgateError
from quantgate.memory.budget import MEMORY_ENV, memory_budget
from quantgate.settings import resolve_store_root

SUMMARY_WIDTH = 120  # long explanations (AMP's reason, the search, a criterion) fold here

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


def register(commands) -> None:
    parser = commands.add_parser("run", help="train, quantize and gate a new version")
    parser.add_argument("--config", type=Path, help="YAML file with settings (see quantgate/config.py)")
    add_set_option(parser, help="override one setting, e.g. --set train.amp.level=O2 (repeatable)")
    add_store_option(parser)
    parser.add_argument("--resume", metavar="VERSION",
                        help="continue training from the latest checkpoint of VERSION (e.g. v3) into a new version; "
                             "same settings except a higher train.epochs")
    parser.add_argument("--no-reuse", dest="reuse", action="store_false",
                        help="recompute every stage, even those an earlier run computed from the same inputs")
    parser.add_argument("--memory-gb", type=float, metavar="GB",
                        help="resident memory the run may use; batch sizes left unset are chosen to fit it (sets "
                             "QUANTGATE_MEMORY_GB; default: 30%% of the cgroup limit or of the machine's memory)")
    parser.add_argument("--verbose", action="store_true",
                        help="show every library's output (Paddle, PaddleSlim, paddle2onnx, Prefect) on the terminal "
                             "instead of only in the version's run.log")
    for flag, key in SHORTCUTS.items():
        parser.add_argument(f"--{flag.replace('_', '-')}", dest=flag, metavar="VALUE", help=f"same as --set {key}=VALUE")
    parser.set_defaults(func=handle)


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


def handle(args: argparse.Namespace) -> int:
    """Validate, check the store, the resume point and the Prefect API, run the flow, print the summary.

    Raises:
        ConfigError: a bad setting or --resume target, before anything runs.
        BadMemoryBudget: --memory-gb or QUANTGATE_MEMORY_GB is not a positive number, before anything runs.
        StoreNotWritable: the store root cannot be written, before anything runs.
        PrefectApiUnreachable: PREFECT_API_URL does not answer, before a version exists.
    """
    config = resolve_config(args)
    if args.memory_gb is not None:  # the flow and every process it starts read the budget from the environment
        os.environ[MEMORY_ENV] = repr(args.memory_gb)
    memory_budget()  # a bad QUANTGATE_MEMORY_GB or --memory-gb: exit 2 before anything runs
    store_root = resolve_store_root(args.store)
    from quantgate.artifacts import open_store  # imported after validation: fail fast, before Paddle loads

    store = open_store(store_root)  # refuses an unwritable root (or a missing bucket) before any training
    if args.resume:
        check_resume(store, config, args.resume)
    from quantgate.lifetime import keep_children
    from quantgate.terminal import quiet_terminal

    keep_children()  # this process is the run: whatever it starts (Prefect's server, workers) ends with it
    started = time.perf_counter()
    with quiet_terminal(args.verbose) as screen:
        try:
            version, failure = run_release(config, store, store_root, args)
        except BaseException as unforeseen:  # still keep (or name) the log; the CLI prints the traceback
            keep_run_log(store, getattr(unforeseen, "version_ref", None), unforeseen, screen.log_file)
            raise
        kept = keep_run_log(store, version, failure, screen.log_file)
        if version is not None:
            info = next(info for info in store.versions(config.model_name) if info.version == version.version)
            for line in summary_lines(info, store.version_location(version), time.perf_counter() - started):
                screen.print(line)
            screen.print(f"  run log   {kept}")
    if failure is not None:
        report_error(failure)
        return failure.exit_code
    return 0


def run_release(config: PipelineConfig, store, store_root: Path | str, args: argparse.Namespace):
    """Check the Prefect API, then run the release flow: (the new version's ref or None, the error or None).

    Raises:
        PrefectApiUnreachable: PREFECT_API_URL does not answer, before a version exists.
    """
    from quantgate.flows.prefect_api import check_prefect_api

    check_prefect_api()  # an unreachable PREFECT_API_URL: exit 3 naming the setting, before a version exists
    from quantgate.flows.release import release

    try:
        name = release(config=config, store=str(store_root), resume=args.resume, reuse=args.reuse)
    except QuantgateError as exc:  # the flow gives the error its version (the gate failed, or a stage broke)
        return getattr(exc, "version_ref", None), exc
    return store.version(config.model_name, name), None


def keep_run_log(store, version, failure: BaseException | None, log_file: Path | None) -> Path | None:
    """Append what was printed outside the stages to the version's run.log; return where the run's log is.

    Without a version (the run stopped before one existed), the captured file stays and the error names it.
    """
    from quantgate.artifacts import ArtifactError
    from quantgate.terminal import readable

    if log_file is None:  # --verbose: it all went to the terminal
        return store.run_log_path(version) if version is not None else None
    text = readable(log_file.read_text(encoding="utf-8", errors="replace"))
    if version is not None:
        try:
            store.append_run_log(version, "===== outside the stages: Prefect, imports =====\n" + text + "\n")
            log_file.unlink()
            return store.run_log_path(version)
        except ArtifactError as exc:
            if failure is not None:
                failure.add_note(f"the run's log could not be added to its version ({exc})")
    if failure is not None:
        failure.add_note(f"library output and Prefect's log lines: {log_file}")
    return log_file


def check_resume(store, config: PipelineConfig, version: str) -> None:
    """Refuse --resume before a new version exists: unknown version, no checkpoint, or other settings.

    A version whose run was interrupted (no version.json) may be resumed, that being what resume
    is for; only its committed checkpoints count, and only after their sealed manifest and every
    byte check out.

    Raises:
        ConfigError: the version or its checkpoint cannot continue this run.
        ArtifactCorrupt: the checkpoint's manifest is malformed, or its bytes changed since it was written.
    """
    from quantgate.artifacts import ArtifactNotFound, InvalidName
    from quantgate.stages.train import CheckpointBytes, ResumeMismatch, read_state, resume_problems

    if config.trained_model is not None:
        raise ConfigError([f"--resume {version} continues a training, and a run with trained_model trains nothing "
                           "(the model in trained_model.path is gated as it is): remove --resume"])
    if config.train.init_from is not None:  # the flow refuses it too; here it fails before Prefect starts
        from quantgate.flows.warm_start import WarmStartRefused, resume_conflict

        raise WarmStartRefused(config.train.init_from, resume_conflict(version, config.train.init_from))
    try:
        ref = store.latest_checkpoint(store.version(config.model_name, version), "train")
    except (ArtifactNotFound, InvalidName) as exc:
        raise ConfigError([f"--resume {version}: {exc}"]) from exc
    try:
        problems = resume_problems(read_state(CheckpointBytes(ref.name, store.read_checkpoint(ref))), config.train)
    except ResumeMismatch as exc:
        raise ConfigError([f"--resume {version}: {exc}"]) from exc
    if problems:
        raise ConfigError([f"--resume {version} (checkpoint {ref.name}): {problem}" for problem in problems])


def summary_lines(info, version_path: str, wall_seconds: float) -> list[str]:
    """The run's summary: verdict, stage times, headline numbers, AMP, scaler, search, memory, gate, aliases."""
    from quantgate.memory.record import MEMORY
    from quantgate.memory.record import summary_lines as memory_summary
    from quantgate.stages import PIPELINE
    from quantgate.stages.gate import Criterion
    from quantgate.stages.gate.outputs import CRITERIA

    record = info.record
    lines = ["", f"quantgate {info.model}/{info.version}: gate {record['status'].upper()}  ({wall_seconds:.1f} s)"]
    seconds = record.get("stage_seconds", {})
    reused = record.get("reused", {})
    for stage in (stage for stage in PIPELINE if stage in seconds):
        note = f"  (reused from {reused[stage]})" if stage in reused else ""
        lines.append(f"  {stage:<9} {seconds[stage]:8.2f} s{note}")
    lines += metric_lines(record.get("metrics")) + training_lines(record) + search_lines(record)
    lines += [wrapped(line) for line in memory_summary(record.get(MEMORY), PIPELINE)]
    lines += [wrapped(f"  gate      {Criterion(**criterion).describe()}")
              for criterion in record.get("gate", {}).get(CRITERIA, [])]
    if record.get("error"):
        lines.append(f"  error     {record['error']}")
    lines.append(f"  aliases   {', '.join(info.aliases) or 'none'}")
    lines.append(f"  stored in {version_path}")
    return lines


def metric_lines(metrics: dict | None) -> list[str]:
    """Accuracy (top-1, or line accuracy and CER for text) and latency of FP32 vs INT8, as evaluated."""
    from quantgate.stages.evaluate import outputs as headline

    if not metrics:
        return []
    measure = metrics.get(headline.ACCURACY_METRIC)
    name = {"line accuracy": "line acc", "hmean": "hmean", "end-to-end line accuracy": "e2e lines"}.get(measure,
                                                                                                      "top-1")
    lines = [f"  {name:<9} FP32 {metrics[headline.FP32_TOP1]:.2f} %   INT8 {metrics[headline.INT8_TOP1]:.2f} %   "
             f"delta {metrics[headline.ACCURACY_DELTA]:+.2f} pts   agreement {metrics[headline.AGREEMENT]:.4f}"]
    if headline.CER_INCREASE in metrics:
        lines.append(f"  CER       FP32 {metrics[headline.FP32_CER]:.2f} %   INT8 {metrics[headline.INT8_CER]:.2f} %   "
                     f"increase {metrics[headline.CER_INCREASE]:+.2f} pts")
    lines.append(f"  latency   FP32 {metrics[headline.LATENCY_P50_FP32]:.3f} ms   "
                 f"INT8 {metrics[headline.LATENCY_P50_INT8]:.3f} ms   (onnxruntime, median per "
                 f"{'page' if measure == 'end-to-end line accuracy' else 'batch'})")
    return lines


def training_lines(record: dict) -> list[str]:
    """What AMP did (requested vs effective) and how the loss scaler fared."""
    from quantgate.stages.train.outputs import AMP, SCALER

    lines = []
    source = record.get("source")
    if source:  # a model trained elsewhere
        origin, spec = source.get("origin", {}), source.get("input", {})
        lines.append(wrapped(f"  source    {origin.get('path')}: not trained here (training and AMP: not applicable); "
                             f"input {spec.get('name')} {spec.get('shape')}, {source.get('parameters'):,} parameters, "
                             f"{len(origin.get('files', {}))} files by sha256"))
    amp = record.get(AMP)
    if amp:
        requested = amp["requested"]
        lines.append(wrapped(f"  AMP       requested {requested['level']}/{requested['dtype']}, "
                             f"effective: {amp['effective']} ({amp['reason']})"))
    scaler = record.get(SCALER)
    if scaler:
        lines.append(f"  scaler    loss scale {scaler['initial_scale']:g} -> {scaler['final_scale']:g} "
                     f"(min {scaler['min_scale']:g}), skipped {scaler['skipped_steps']} of {scaler['steps']} steps "
                     f"(limit {scaler['max_skipped_ratio']:.0%}){'' if scaler['scaler_enabled'] else ', scaler disabled'}")
    return lines


def search_lines(record: dict) -> list[str]:
    """The INT8 search's verdict on the validation split, and what the policy cost, when the run searched."""
    from quantgate.stages.quantize.outputs import POLICY_COST, POLICY_MAX_DROP, POLICY_MIN_AGREEMENT, SEARCH

    search = record.get(SEARCH)
    if not search:
        return []
    layers = ", ".join(search["float_layers"]) or "none"
    verdict = "passed" if search["passed"] else "NOTHING PASSED"
    line = (f"  search    {verdict} on validation: kept trial {search['kept_trial']} of {search['trials']} "
            f"({search['recipe']['algo']}), FP32 layers: {layers}, drop {search['validation']['accuracy_drop_pts']:+.2f}"
            f" pts, {search['wall_s']:.1f} s; {search['stopped']}")
    cost = search.get(POLICY_COST)  # what meeting the policy cost (absent in records from before it)
    lines = [wrapped(line), *([wrapped(f"  trade-off {cost}")] if cost else [])]
    needed = search.get("validation_samples_needed") or {}  # the data could not give the policy enough samples
    if needed.get("short"):
        unit = "lines" if (record.get("metrics") or {}).get("task") == "text_recognition" else "samples"
        shown = {"min_agreement": f"agreement {search.get(POLICY_MIN_AGREEMENT)}",
                 "max_accuracy_drop": f"a drop within {search.get(POLICY_MAX_DROP)} pts"}
        lines.append(wrapped(f"  validation {needed['samples']} {unit}: too few to show "
                             + ", ".join(f"{shown.get(name, name)} (needs {needed['needed'][name]})"
                                         for name in needed["short"])
                             + f"; add labelled {unit} (data.validation_rule says how the split was sized)"))
    return lines


def wrapped(line: str, width: int = SUMMARY_WIDTH) -> str:
    """A long summary line folded at `width`, continuation lines indented under its text."""
    return "\n".join(textwrap.wrap(line, width, subsequent_indent=" " * 12, break_long_words=False,
                                   break_on_hyphens=False)) or line
