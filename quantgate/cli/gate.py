"""`quantgate gate VERSION`: decide a stored version again under another policy, without retraining.

Exit codes: 0 the gate passed, 1 it failed (the decision is recorded either way), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from quantgate.cli.shared import (
    MODEL_PICK_HELP,
    add_model_option,
    add_set_option,
    add_store_option,
    finished_version,
    store_and_model,
)
from quantgate.config import ConfigError, validate_config
from quantgate.config_files import apply_override, read_yaml
from quantgate.errors import EXIT_OK, EXIT_REJECTED


def register(commands) -> None:
    parser = commands.add_parser("gate", help="re-decide a stored version under another policy (no retraining)")
    parser.add_argument("version", help="version to decide again, e.g. v3")
    parser.add_argument("--policy", type=Path, help="YAML with gate settings (top level or under 'gate:')")
    add_set_option(parser, metavar="gate.KEY=VALUE",
                   help="override one gate setting, e.g. --set gate.max_accuracy_drop=0.5 (repeatable)")
    add_model_option(parser, help=MODEL_PICK_HELP)
    add_store_option(parser)
    parser.set_defaults(func=handle)


def resolve_policy(base: dict, policy_file: Path | None, overrides: list[str], evaluate: dict | None = None):
    """The version's recorded policy, then the YAML file, then --set gate.* overrides; validated against the
    version's recorded `evaluate` section (a threshold map must name the runtimes it was evaluated in).

    Raises:
        ConfigError: listing every bad field, or an override outside `gate.`.
    """
    runtimes = (evaluate or {}).get("runtimes")
    raw = {"gate": dict(base), **({"evaluate": {"runtimes": runtimes}} if runtimes else {})}
    if policy_file:
        loaded = read_yaml(policy_file)
        if "gate" in loaded:  # a pipeline config file: only its gate section can apply to a stored version
            others = sorted(set(loaded) - {"gate"})
            if others or not isinstance(loaded["gate"], dict):
                raise ConfigError([f"policy file {policy_file}: {key}: does not apply when deciding again; keep only "
                                   "the gate section (or gate settings at the top level)" for key in others or ["gate"]])
            loaded = loaded["gate"]
        raw["gate"].update(loaded)
    outside = [item for item in overrides if not item.strip().startswith("gate.")]
    if outside:
        raise ConfigError([f"override {item!r}: only gate.* settings can change when deciding again "
                           "(training settings need a new run: quantgate run)" for item in outside])
    for item in overrides:
        apply_override(raw, item)
    return validate_config(raw).gate


def handle(args: argparse.Namespace) -> int:
    """Decide again, record the decision next to the version, and print every criterion.

    Raises:
        BadTarget: unknown model or version, or one that did not finish.
        ConfigError: the policy file or an override is invalid.
    """
    from quantgate.artifacts import ArtifactError
    from quantgate.flows.duel import DUEL, current_release, score_release_now, stored_duel
    from quantgate.flows.evidence import gate_evidence
    from quantgate.stages.gate import gate
    from quantgate.stages.gate.outputs import GATE_FILE
    from quantgate.stages.quantize.outputs import SEARCH
    from quantgate.stages.system.outputs import TASK_NAME as OCR_SYSTEM

    store, model = store_and_model(args)
    ref = finished_version(store, model, args.version)
    record = store.version_record(ref)
    config = record.get("config", {})
    policy = resolve_policy(config.get("gate", {}), args.policy, args.overrides, config.get("evaluate"))
    try:
        evaluated = store.finalized_stage_ref(ref, "evaluate")
        metrics, predictions, stale = gate_evidence(store, evaluated)
        evaluated_digest = evaluated.manifest_sha256
    except ArtifactError as exc:  # no trustworthy evaluation: decide on nothing, which fails
        evaluated, metrics, predictions, stale, evaluated_digest = None, {}, None, (str(exc),), None
    release, problem = current_release(store, model)
    if metrics.get("task") == OCR_SYSTEM:  # judged from its stored reads: no model runs
        return _system_decided(store, ref, policy, release)
    with tempfile.TemporaryDirectory() as scratch:
        # The same rule as publishing: judged against the release there is now, on the same test samples; the
        # version's own duel when it was against that release, else the release scored now.
        duel = _stored_duel_against(store, ref, release, DUEL, stored_duel) if not problem else None
        if duel is None and release is not None and evaluated is not None:
            duel = score_release_now(store, store.finalized_stage_ref(ref, "data"), evaluated, release,
                                     Path(scratch), problem)
        # A version from the INT8 search keeps its search verdict (judged under the run's own policy).
        decision = gate(policy, metrics, Path(scratch), predictions, duel, stale, record.get(SEARCH))
        gate_record = json.loads((Path(scratch) / GATE_FILE).read_text())
    where = store.record_decision(ref, {"gate": gate_record, "evaluate_manifest_sha256": evaluated_digest})
    print(f"quantgate {model}/{ref.version}: gate {'PASSED' if decision.passed else 'FAILED'} (decided again)")
    for criterion in decision.criteria:
        print(f"  gate      {criterion.describe()}")
    if len(decision.runtimes) > 1:  # the version passes only if every listed runtime does
        print("  runtimes  " + " | ".join(f"{runtime} {'passed' if verdict['passed'] else 'FAILED'}"
                                          for runtime, verdict in decision.runtimes.items()))
    print(f"  recorded  {store.shown(where)}")
    return EXIT_OK if decision.passed else EXIT_REJECTED


def _system_decided(store, ref, policy, release: str | None) -> int:
    from quantgate.flows.system import system_decision
    from quantgate.stages.gate import Criterion

    gate_record = system_decision(store, ref, policy, release)
    where = store.record_decision(ref, {"gate": gate_record})
    print(f"quantgate {ref.model}/{ref.version}: gate {'PASSED' if gate_record['passed'] else 'FAILED'} (decided again)")
    for criterion in gate_record["criteria"]:
        print(f"  gate      {Criterion(**criterion).describe()}")
    print(f"  recorded  {store.shown(where)}")
    return EXIT_OK if gate_record["passed"] else EXIT_REJECTED


def _stored_duel_against(store, ref, release: str | None, stage: str, read):
    """The version's own duel when it was against `release` and still verifies; else None (score it now)."""
    from quantgate.artifacts import ArtifactError

    if release is None:
        return None
    try:
        duel_ref = store.finalized_stage_ref(ref, stage)
    except ArtifactError:
        return None  # no duel stored (nothing was released then, or a version from before the duel)
    duel = read(store, duel_ref)
    return duel if duel.version == release else None
