"""`quantgate gate`, `promote`, `rollback` and `log`: decide again, move `release`, show who moved what.

Exit codes: 0 passed / moved / shown, 1 the gate failed or the move was refused because of it,
2 bad input (unknown model or version, bad policy), 3 the store is broken.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from quantgate.config import ConfigError, apply_override, read_yaml, validate_config
from quantgate.errors import QuantgateError
from quantgate.settings import STORE_ENV, resolve_store_root

RELEASE = "release"
FINISHED = ("passed", "failed")


class Refused(QuantgateError):
    """An alias move was refused because the target's gate did not pass (or cannot be trusted)."""

    exit_code = 1


class BadTarget(QuantgateError):
    """The model or version named on the command line cannot be used."""

    exit_code = 2


def add_parsers(commands) -> None:
    """Register the commands on the `quantgate` sub-command parser."""
    store_help = f"artifact store root (default: ${STORE_ENV} or ~/.quantgate/store)"
    model_help = "model name (default: the store's only model)"

    gate = commands.add_parser("gate", help="re-decide a stored version under another policy (no retraining)")
    gate.add_argument("version", help="version to decide again, e.g. v3")
    gate.add_argument("--policy", type=Path, help="YAML with gate settings (top level or under 'gate:')")
    gate.add_argument("--set", dest="overrides", action="append", default=[], metavar="gate.KEY=VALUE",
                      help="override one gate setting, e.g. --set gate.max_accuracy_drop=0.5 (repeatable)")

    promote = commands.add_parser("promote", help="point 'release' at a version whose gate passed")
    promote.add_argument("version", help="version to release, e.g. v3")

    rollback = commands.add_parser("rollback", help="point 'release' back at its previous target")

    log = commands.add_parser("log", help="show the audit log of alias moves")
    log.add_argument("--json", action="store_true", help="print JSON lines for scripts")

    for parser in (gate, promote, rollback, log):
        parser.add_argument("--model", help=model_help)
        parser.add_argument("--store", help=store_help)
    for parser in (promote, rollback):
        parser.add_argument("--reason", default="", help="why; recorded in the audit log")


def _open(args: argparse.Namespace):
    from quantgate.artifacts import ArtifactStore

    store = ArtifactStore(resolve_store_root(args.store))
    if args.model:
        return store, args.model
    models = store.models()
    if len(models) != 1:
        raise BadTarget(f"store {store.root} holds {len(models)} models ({', '.join(models) or 'none'}); "
                        "name one with --model")
    return store, models[0]


def _version(store, model: str, version: str):
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


def resolve_policy(base: dict, policy_file: Path | None, overrides: list[str]):
    """The version's recorded policy, then the YAML file, then --set gate.* overrides; validated.

    Raises:
        ConfigError: listing every bad field, or an override outside `gate.`.
    """
    raw = {"gate": {key: value for key, value in base.items()}}
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


def gate_verdict(store, ref) -> tuple[bool, str]:
    """Whether the version's newest decision passed, and what it was; fails closed on anything unverifiable."""
    from quantgate.artifacts import ArtifactError
    from quantgate.flows.evidence import gate_evidence

    try:
        evaluated = store.finalized_stage_ref(ref, "evaluate")
        _, _, stale = gate_evidence(store, evaluated)
        if stale:
            return False, "its evaluation cannot be trusted: " + "; ".join(stale)
        decisions = store.decisions(ref)
        if decisions:
            last = decisions[-1]
            if last.get("evaluate_manifest_sha256") != evaluated.manifest_sha256:
                return False, f"decision {last.get('decision')} judged another evaluation than the stored one"
            gate_record, source = last.get("gate", {}), f"decision {last.get('decision')} (quantgate gate)"
        else:
            gate_record = store.read_manifest(store.finalized_stage_ref(ref, "gate"))["metrics"]
            source = "the run's gate"
    except ArtifactError as exc:
        return False, f"its gate record cannot be read or verified: {exc}"
    failed = [c["name"] for c in gate_record.get("criteria", []) if not c.get("passed")]
    passed = gate_record.get("passed") is True and not failed
    return passed, f"{source}: {'passed' if passed else 'failed ' + ', '.join(failed or ['(no verdict)'])}"


def command_gate(args: argparse.Namespace) -> int:
    from quantgate.artifacts import ArtifactError
    from quantgate.flows.evidence import gate_evidence, release_baseline
    from quantgate.stages.gate.decision import gate
    from quantgate.stages.gate.outputs import GATE_FILE

    store, model = _open(args)
    ref = _version(store, model, args.version)
    record = store.version_record(ref)
    policy = resolve_policy(record.get("config", {}).get("gate", {}), args.policy, args.overrides)
    try:
        evaluated = store.finalized_stage_ref(ref, "evaluate")
        metrics, predictions, stale = gate_evidence(store, evaluated)
        evaluated_digest = evaluated.manifest_sha256
    except ArtifactError as exc:  # no trustworthy evaluation: decide on nothing, which fails
        metrics, predictions, stale, evaluated_digest = {}, None, (str(exc),), None
    with tempfile.TemporaryDirectory() as scratch:
        # A version from the INT8 search keeps its search verdict (judged under the run's own policy).
        decision = gate(policy, metrics, Path(scratch), predictions, release_baseline(store, model), stale,
                        record.get("search"))
        gate_record = json.loads((Path(scratch) / GATE_FILE).read_text())
    where = store.record_decision(ref, {"gate": gate_record, "evaluate_manifest_sha256": evaluated_digest})
    print(f"quantgate {model}/{ref.version}: gate {'PASSED' if decision.passed else 'FAILED'} (decided again)")
    for criterion in decision.criteria:
        print(f"  gate      {criterion.describe()}")
    print(f"  recorded  {store.root / where}")
    return 0 if decision.passed else 1


def command_promote(args: argparse.Namespace) -> int:
    store, model = _open(args)
    ref = _version(store, model, args.version)
    passed, why = gate_verdict(store, ref)
    if not passed:
        raise Refused(f"refusing to promote {model}/{ref.version} to {RELEASE}: {why}. "
                      f"Promote a version whose gate passed, or decide again with `quantgate gate {ref.version}`")
    current = store.alias(model, RELEASE)
    if current == ref.version:
        print(f"{RELEASE} already points at {model}/{ref.version}; nothing moved")
        return 0
    store.set_alias(model, RELEASE, ref.version, reason=args.reason or f"promoted ({why})", action="promote")
    print(f"{RELEASE}: {model}/{current or 'none'} -> {ref.version} ({why})")
    return 0


def release_targets(entries: list[dict]) -> list[str]:
    """The stack of release targets the audit log describes: moves push, rollbacks pop."""
    stack: list[str] = []
    for entry in entries:
        if entry.get("alias") != RELEASE:
            continue
        if entry.get("action") == "rollback":
            if stack:
                stack.pop()
        elif not stack or stack[-1] != entry.get("to"):
            stack.append(entry.get("to"))
    return stack


def command_rollback(args: argparse.Namespace) -> int:
    store, model = _open(args)
    current = store.alias(model, RELEASE)
    if current is None:
        raise Refused(f"{model} has no {RELEASE} yet; there is nothing to roll back")
    stack = release_targets(store.audit_log(model))
    if not stack or stack[-1] != current:
        raise Refused(f"the audit log's latest {RELEASE} of {model} is {stack[-1] if stack else 'none'}, but the alias "
                      f"points at {current}: it was moved outside quantgate, so the previous target is unknown; "
                      "use `quantgate promote VERSION`")
    if len(stack) < 2:
        raise Refused(f"{RELEASE} of {model} has had no earlier target than {current}; there is nothing to roll back to")
    target = stack[-2]
    passed, why = gate_verdict(store, _version(store, model, target))
    if not passed:
        raise Refused(f"refusing to roll {RELEASE} of {model} back to {target}: {why}. "
                      "Promote a version whose gate passed with `quantgate promote VERSION`")
    store.set_alias(model, RELEASE, target, reason=args.reason or f"rollback from {current}", action="rollback")
    print(f"{RELEASE}: {model}/{current} -> {target} (rollback; {why})")
    return 0


def command_log(args: argparse.Namespace) -> int:
    store, model = _open(args)
    entries = store.audit_log(model)
    for entry in entries:
        if args.json:
            print(json.dumps(entry, sort_keys=True))
        else:
            print(f"{entry.get('at')}  {entry.get('who')}  {entry.get('alias')}: {entry.get('from') or 'none'} -> "
                  f"{entry.get('to')}  [{entry.get('action')}] {entry.get('why')}")
    return 0


HANDLERS = {"gate": command_gate, "promote": command_promote, "rollback": command_rollback, "log": command_log}
