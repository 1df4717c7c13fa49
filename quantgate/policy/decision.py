"""The release decision: criterion by criterion, whether the INT8 model may be released.

The gate fails closed: a metric that is missing, not a finite number, or stale (it does not
belong to this version's inputs) fails its criterion. A criterion that cannot apply (no
release to compare with yet) says so with the verdict "not_applicable" and does not block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from quantgate.config import GatePolicy
from quantgate.policy.criterion import NOT_APPLICABLE, Criterion, criterion, not_applicable, number
from quantgate.policy.predictions import (
    DeltaInterval,
    paired_bootstrap_delta,  # noqa: F401  (part of the gate's API, imported from here)
    task_of_metrics,
)
from quantgate.policy.release_duel import ReleaseDuel, release_criteria
from quantgate.policy.runtimes import (
    FP32_MODEL,
    INT8_MODEL,
    LIBRARY,
    PRIMARY_RUNTIME,
    RUNTIMES,
    RUNTIMES_NOT_APPLICABLE,
    criterion_name,
    inapplicable_runtimes,
    measured_runtimes,
    primary_runtime,
    runtime_entry,
    runtime_metrics,
    runtime_verdicts,
)
from quantgate.stages.evaluate.outputs import CER_INCREASE, FP32_CER, HMEAN_DROP, INT8_CER
from quantgate.stages.gate.outputs import RELEASE_CRITERIA, RELEASE_DUEL
from quantgate.tasks import TEXT_DETECTION, TEXT_RECOGNITION

# What the criteria read (the CER keys only for text recognition).
JUDGED = ("fp32_top1_pct", "int8_top1_pct", "agreement", "speedup_int8_vs_fp32", FP32_CER, INT8_CER, CER_INCREASE,
          HMEAN_DROP)


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    criteria: tuple[Criterion, ...]
    evidence: dict = field(default_factory=dict, hash=False)

    @property
    def failed(self) -> tuple[Criterion, ...]:
        return tuple(criterion for criterion in self.criteria if not criterion.passed)

    @property
    def runtimes(self) -> dict[str, dict]:
        """{runtime: {"passed", "failed": [criterion names], "delta_interval"}} for every judged runtime."""
        return self.evidence.get(RUNTIMES, {})

    @property
    def metrics(self) -> dict:
        """The decision as the gate stage's manifest metrics."""
        return self.as_dict()

    def as_dict(self) -> dict:
        return {"passed": self.passed, "criteria": [asdict(criterion) for criterion in self.criteria],
                **self.evidence}


def _interval(policy: GatePolicy, runtime: str, interval: DeltaInterval | None, name: str, missing: str) -> Criterion:
    threshold = 0.0 - policy.threshold("max_accuracy_drop", runtime)  # 0.0 - x: never "-0"
    low = None if interval is None else interval.low_pts
    if not policy.require_ci_within_drop:
        return not_applicable(name, threshold, ">=", "pts", "informational: gate.require_ci_within_drop is false",
                               low if low is not None and math.isfinite(low) else None)
    return criterion(name, low, threshold, ">=", "pts",
                      "" if interval is not None else missing or "no paired predictions to bootstrap")


def _speedup_note(metrics: dict) -> str:
    fp32_ms, int8_ms = number(metrics, "latency_ms_p50_fp32"), number(metrics, "latency_ms_p50_int8")
    if fp32_ms is None or int8_ms is None:
        return ""
    return f"median {fp32_ms:.3g} ms FP32 / {int8_ms:.3g} ms INT8 per call"


def _cer_note(metrics: dict) -> str:
    fp32, int8 = number(metrics, FP32_CER), number(metrics, INT8_CER)
    return "" if fp32 is None or int8 is None else f"character error rate {fp32:.3g} % FP32 / {int8:.3g} % INT8"


def _search(search: dict) -> Criterion:
    """The INT8 search must have found a recipe that met the policy on the validation split."""
    passed = search.get("passed") is True
    note = (f"trial {search.get('kept_trial')} of {search.get('trials')} kept, "
            f"{len(search.get('float_layers') or [])} FP32 layer(s); {search.get('stopped', '')}")
    if not passed:
        note += ": no recipe met the policy on the validation split, so no test-split result can release it"
    return Criterion("search_validation", 1.0 if passed else 0.0, 1, ">=", "passed", passed, note=note)


def _unnamed_note(policy: GatePolicy, field_name: str, runtime: str) -> str:
    """The note of a criterion judged by the strictest value of a map that does not name `runtime`: the
    INT8 search judges its candidates in onnxruntime whether evaluate.runtimes lists it or not."""
    if not policy.unnamed_runtimes((runtime,)).get(field_name):
        return ""
    return f"gate.{field_name} names no {runtime}: its strictest value applies"


def _joined(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _runtime_criteria(policy: GatePolicy, runtime: str, primary: str, metrics: dict | None,
                      interval: DeltaInterval | None, task: str = "classification") -> dict[str, Criterion]:
    """The criteria every runtime is judged by, named for `runtime`, each against `runtime`'s threshold (a
    policy field may be a map by runtime); all fail closed without its metrics.

    The accuracy criteria read top-1 or, for text recognition, line accuracy (stored under the same keys);
    text adds the rise of the character error rate, which classification has no criterion for. Text detection
    (`task`) judges the hmean's drop (hmean_drop_pts, gate.max_hmean_drop_pts) in accuracy_drop_pts' place.
    """
    text, detection = task == TEXT_RECOGNITION, task == TEXT_DETECTION
    def name(base: str) -> str:
        return criterion_name(runtime, primary, base)

    def judged(base: str, measured_value: float | None, field_name: str, comparison: str, unit: str,
               note: str = "") -> Criterion:
        return criterion(name(base), measured_value, policy.threshold(field_name, runtime), comparison, unit,
                          _joined(note, _unnamed_note(policy, field_name, runtime)))

    missing = "" if metrics is not None else (f"the evaluation has no metrics for {runtime}, "
                                             "which evaluate.runtimes lists")
    measured = metrics or {}
    fp32, int8 = number(measured, "fp32_top1_pct"), number(measured, "int8_top1_pct")
    drop = None if fp32 is None or int8 is None else fp32 - int8
    forms = ("" if runtime == primary or not measured.get(INT8_MODEL) else
             f"{measured.get(LIBRARY, runtime)}: {measured.get(INT8_MODEL)} vs {measured.get(FP32_MODEL, 'FP32')}")
    cer = {} if not text else {CER_INCREASE: judged(
        CER_INCREASE, number(measured, CER_INCREASE), "max_cer_increase_pts", "<=", "pts",
        missing or _cer_note(measured))}
    accuracy = {HMEAN_DROP: judged(HMEAN_DROP, drop, "max_hmean_drop_pts", "<=", "pts", missing or forms)} \
        if detection else \
        {"accuracy_drop_pts": judged("accuracy_drop_pts", drop, "max_accuracy_drop", "<=", "pts", missing or forms)}
    return {
        **accuracy,
        **cer,
        "agreement": judged("agreement", number(measured, "agreement"), "min_agreement", ">=", "fraction", missing),
        "int8_top1_pct": judged("int8_top1_pct", int8, "min_int8_accuracy", ">=", "%", missing),
        "delta_ci95_low_pts": _interval(policy, runtime, interval, name("delta_ci95_low_pts"), missing),
        "speedup": judged("speedup", number(measured, "speedup_int8_vs_fp32"), "min_speedup", ">=", "x",
                          missing or _speedup_note(measured)),
    }


def _primary_problems(metrics: dict, primary: str) -> list[str]:
    """Why the top-level metrics may not be the primary runtime's, which the criteria without prefix judge."""
    recorded = metrics.get(PRIMARY_RUNTIME)
    if isinstance(recorded, str) and recorded != primary:
        return [f"the evaluation's top-level metrics are {recorded}'s, not those of {primary}, the primary runtime"]
    entry = runtime_entry(metrics, primary)
    return [f"{key} {metrics[key]!r} differs from {primary}'s own entry ({entry[key]!r})"
            for key in JUDGED if entry and key in entry and key in metrics and entry[key] != metrics[key]]


def judged_runtimes(metrics: dict, runtimes: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str]:
    """The runtimes to judge (`runtimes`, else those the evaluation measured, less those it found not applicable)
    and the primary one."""
    inapplicable = inapplicable_runtimes(metrics)
    listed = tuple(runtime for runtime in (tuple(runtimes) or measured_runtimes(metrics))
                   if runtime not in inapplicable)
    primary = primary_runtime(listed)
    return (primary, *(runtime for runtime in listed if runtime != primary)), primary


def _not_judged(metrics: dict) -> dict[str, Criterion]:
    """{runtime: its one criterion} for each listed runtime the evaluation found not applicable to the model: the
    reason, never a pass or a fail."""
    return {runtime: Criterion(f"{runtime}.runtime", None, 1, ">=", "", True, NOT_APPLICABLE, why)
            for runtime, why in inapplicable_runtimes(metrics).items()}


def decide(policy: GatePolicy, metrics: dict, interval: DeltaInterval | None = None,
           release: ReleaseDuel | None = None, stale: tuple[str, ...] = (),
           search: dict | None = None, runtimes: tuple[str, ...] = (),
           intervals: Mapping[str, DeltaInterval | None] | None = None) -> GateDecision:
    """Apply `policy` to the evaluation metrics, the delta's interval, the duel with the release and
    staleness, and, when the INT8 model came from a search (`search`: its summary), to the search's verdict.

    Every runtime in `runtimes` (evaluate.runtimes; default: those the metrics hold, else onnxruntime) is
    judged by the same criteria, each against that runtime's threshold (a policy field may be a map by
    runtime), and against the release on the duel's paired samples in that runtime (`release`: None when
    nothing was released); the primary runtime's criteria keep their plain names. `interval` is the primary
    runtime's, `intervals` any runtime's. The metrics' "task" decides what is judged: text recognition adds
    cer_increase_pts and release_cer_increase_pts per runtime. A runtime the evaluation found not applicable
    (RUNTIMES_NOT_APPLICABLE) is not judged: one not_applicable criterion says why.
    """
    listed, primary = judged_runtimes(metrics, runtimes)
    not_judged = _not_judged(metrics)
    intervals = {**(intervals or {}), **({primary: interval} if interval is not None else {})}
    task, task_problems = task_of_metrics(metrics)
    text = task == TEXT_RECOGNITION
    stale = (*stale, *task_problems, *_primary_problems(metrics, primary))
    against_release, duel_summary = release_criteria(policy, release, listed, primary, task)
    by_runtime = {runtime: [c for c in against_release if c.name in
                            {criterion_name(runtime, primary, base) for base in RELEASE_CRITERIA}] for runtime in listed}
    own = _runtime_criteria(policy, primary, primary, metrics, intervals.get(primary), task)
    others = [criterion for runtime in listed[1:] for criterion in (*_runtime_criteria(
        policy, runtime, primary, runtime_metrics(metrics, runtime, primary), intervals.get(runtime), task).values(),
        *by_runtime[runtime])]
    criteria = (
        own[HMEAN_DROP] if task == TEXT_DETECTION else own["accuracy_drop_pts"],
        *((own[CER_INCREASE],) if text else ()), own["agreement"], own["int8_top1_pct"],
        own["delta_ci95_low_pts"],
        *by_runtime[primary],
        criterion("stale_evidence", float(len(stale)), 0, "<=", "problems", "; ".join(stale)),
        own["speedup"],
        *others,
        *not_judged.values(),
        *((_search(search),) if search is not None else ()),
    )
    verdicts = runtime_verdicts([asdict(criterion) for criterion in criteria], listed, primary)
    evidence = {
        "delta_interval": None if intervals.get(primary) is None else asdict(intervals[primary]),
        RELEASE_DUEL: duel_summary,
        "stale_problems": list(stale),
        PRIMARY_RUNTIME: primary,
        RUNTIMES: {runtime: {**verdict, "delta_interval": None if intervals.get(runtime) is None
                             else asdict(intervals[runtime])} for runtime, verdict in verdicts.items()},
        **({RUNTIMES_NOT_APPLICABLE: {runtime: c.note for runtime, c in not_judged.items()}} if not_judged else {}),
    }
    return GateDecision(all(criterion.passed for criterion in criteria), criteria, evidence)
