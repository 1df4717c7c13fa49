"""Which runtimes a version was evaluated in, and each one's verdict, read from the gate's criteria.

The evaluation's top-level metrics belong to the primary runtime (onnxruntime when listed, else the
first listed one); every listed runtime also has its own entry under metrics["runtimes"]. The gate
names the primary runtime's criteria as before (accuracy_drop_pts, ...) and prefixes every other
runtime's with its name (openvino.accuracy_drop_pts, ...), so one flat list of criteria still decides.

A listed runtime the evaluation found not applicable to the model (Paddle Inference and a PIR program, which has
no Paddle INT8 program: RUNTIMES_NOT_APPLICABLE) is not judged: one "not_applicable" criterion says why, it
neither passes nor fails, and it has no verdict under the gate's runtimes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict

from quantgate.stages.gate.outputs import CRITERIA, PASSED, RELEASE_CRITERIA

# The evaluate stage's keys for runtimes (issue 18's contract).
RUNTIMES = "runtimes"
PRIMARY_RUNTIME = "primary_runtime"
CPU = "cpu"
PREDICTIONS_FILE_KEY = "predictions_file"
RUNTIMES_NOT_APPLICABLE = "runtimes_not_applicable"  # {runtime: why}; stages/evaluate/outputs.py says the same
LIBRARY = "library"
FP32_MODEL, INT8_MODEL, INT8_OPS = "fp32_model", "int8_model", "int8_ops"
DEFAULT_RUNTIME = "onnxruntime"

# Criteria judged once per runtime, the comparison with the release too (on the duel's paired samples in that
# runtime). cer_increase_pts and release_cer_increase_pts: text recognition only.
PER_RUNTIME = ("accuracy_drop_pts", "cer_increase_pts", "hmean_drop_pts", "e2e_line_drop_pts", "agreement", "int8_top1_pct", "delta_ci95_low_pts", "speedup",
               *RELEASE_CRITERIA)
PRIMARY_ONLY: tuple[str, ...] = ()

# What the version record shows per runtime besides the evaluate stage's HEADLINE_METRICS.
DESCRIPTIVE = (LIBRARY, FP32_MODEL, INT8_MODEL, INT8_OPS)


def primary_runtime(runtimes: Iterable[str]) -> str:
    """onnxruntime when listed, else the first listed runtime: the one the top-level metrics belong to."""
    listed = tuple(runtimes)
    return DEFAULT_RUNTIME if DEFAULT_RUNTIME in listed or not listed else listed[0]


def listed_runtimes(evaluate_config: Mapping | None) -> tuple[str, ...]:
    """The runtimes an evaluation was asked for (its recorded config's `runtimes`), onnxruntime if it predates them."""
    value = (evaluate_config or {}).get(RUNTIMES)
    if isinstance(value, (list, tuple)) and value and all(isinstance(name, str) for name in value):
        return tuple(value)
    return (DEFAULT_RUNTIME,)


def measured_runtimes(metrics: Mapping) -> tuple[str, ...]:
    """The runtimes an evaluation has metrics for, primary first; onnxruntime alone if it records none."""
    per_runtime = metrics.get(RUNTIMES)
    named = tuple(per_runtime) if isinstance(per_runtime, Mapping) and per_runtime else ()
    primary = metrics.get(PRIMARY_RUNTIME) if isinstance(metrics.get(PRIMARY_RUNTIME), str) else primary_runtime(named)
    return (primary, *(name for name in named if name != primary))


def inapplicable_runtimes(metrics: Mapping) -> dict[str, str]:
    """{runtime: why} for the runtimes an evaluation (or a gate record) says are not applicable to the model."""
    value = metrics.get(RUNTIMES_NOT_APPLICABLE)
    return {str(runtime): str(why) for runtime, why in value.items()} if isinstance(value, Mapping) else {}


def runtime_metrics(metrics: Mapping, runtime: str, primary: str) -> dict | None:
    """`runtime`'s metrics: the top-level ones for the primary runtime, its entry under "runtimes" otherwise."""
    if runtime == primary:
        return dict(metrics)
    entry = runtime_entry(metrics, runtime)
    return entry or None


def criterion_name(runtime: str, primary: str, name: str) -> str:
    return name if runtime == primary else f"{runtime}.{name}"


def owner(name: str, runtimes: Iterable[str], primary: str) -> str | None:
    """The runtime a criterion judges, or None for one about the whole version (stale evidence, search)."""
    for runtime in runtimes:
        if runtime != primary and name.startswith(f"{runtime}."):
            return runtime
    return primary if name in PER_RUNTIME + PRIMARY_ONLY else None


def runtime_verdicts(criteria: Iterable[Mapping], runtimes: Iterable[str], primary: str) -> dict[str, dict]:
    """{runtime: {"passed", "failed": [criterion names]}} from the gate's criteria (as dicts)."""
    listed = tuple(runtimes)
    verdicts = {runtime: {PASSED: True, "failed": []} for runtime in listed}
    for criterion in criteria:
        runtime = owner(criterion["name"], listed, primary)
        if runtime in verdicts and not criterion[PASSED]:
            verdicts[runtime][PASSED] = False
            verdicts[runtime]["failed"].append(criterion["name"])
    return verdicts


def gate_runtimes(gate_record: Mapping) -> tuple[tuple[str, ...], str]:
    """The runtimes a gate record judged and its primary one (onnxruntime alone for records before runtimes)."""
    judged = gate_record.get(RUNTIMES)
    runtimes = tuple(judged) if isinstance(judged, Mapping) and judged else (DEFAULT_RUNTIME,)
    primary = gate_record.get(PRIMARY_RUNTIME)
    primary = primary if isinstance(primary, str) else primary_runtime(runtimes)
    # Stored records have sorted keys: put the primary runtime first again.
    return (primary, *(runtime for runtime in runtimes if runtime != primary)), primary


def with_criterion(gate_record: Mapping, *replacements) -> dict:
    """`gate_record` with each criterion of the same name as one of `replacements` (Criterion) replaced by it,
    and the version's and every runtime's verdict recomputed; used when publishing judges the release again."""
    replaced = {criterion.name: asdict(criterion) for criterion in replacements}
    criteria = [replaced.get(c.get("name"), c) for c in gate_record[CRITERIA]]
    runtimes, primary = gate_runtimes(gate_record)
    verdicts = runtime_verdicts(criteria, runtimes, primary)
    previous = gate_record.get(RUNTIMES) if isinstance(gate_record.get(RUNTIMES), Mapping) else {}
    merged = {runtime: {**(previous.get(runtime) or {}), **verdict} for runtime, verdict in verdicts.items()}
    return {**gate_record, CRITERIA: criteria, PASSED: all(c.get(PASSED) for c in criteria), RUNTIMES: merged}


def runtime_headlines(evaluation: Mapping, gate_record: Mapping, headline_keys: Iterable[str]) -> dict[str, dict]:
    """{runtime: {headline numbers..., "passed", "failed"}} for the version record, in the gate's order."""
    runtimes, primary = gate_runtimes(gate_record)
    verdicts = gate_record.get(RUNTIMES) if isinstance(gate_record.get(RUNTIMES), Mapping) else {}
    fallback = runtime_verdicts(gate_record.get(CRITERIA, []), runtimes, primary)
    keys = (*headline_keys, *DESCRIPTIVE)
    headlines = {}
    for runtime in runtimes:
        own = runtime_entry(evaluation, runtime)
        # The primary runtime's entry adds the descriptive keys; its numbers are the top-level ones.
        measured = {**own, **evaluation} if runtime == primary else own
        verdict = verdicts.get(runtime) or fallback[runtime]
        headlines[runtime] = {**{key: measured[key] for key in keys if key in measured},
                              PASSED: bool(verdict.get(PASSED)), "failed": list(verdict.get("failed", []))}
    return headlines


def with_verdicts(headlines: Mapping, gate_record: Mapping) -> dict[str, dict]:
    """The version record's per-runtime headlines with each verdict taken from `gate_record` again."""
    verdicts = gate_record.get(RUNTIMES) if isinstance(gate_record.get(RUNTIMES), Mapping) else {}
    return {runtime: {**entry, **{key: verdicts[runtime][key] for key in (PASSED, "failed")
                                  if key in verdicts.get(runtime, {})}}
            for runtime, entry in headlines.items()}


def runtime_entry(evaluation: Mapping, runtime: str) -> dict:
    """`runtime`'s own entry under the evaluation's "runtimes" ({} when it has none)."""
    entry = (evaluation.get(RUNTIMES) or {}).get(runtime) if isinstance(evaluation.get(RUNTIMES), Mapping) else None
    return dict(entry) if isinstance(entry, Mapping) else {}
