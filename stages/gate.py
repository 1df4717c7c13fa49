"""Gate stage: decide, criterion by criterion, whether the INT8 model may be released.

The gate fails closed: a metric that is missing or not a finite number fails its criterion.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from quantgate.config import GatePolicy

GATE_FILE = "gate.json"


@dataclass(frozen=True)
class Criterion:
    """One rule of the policy with the value this run measured."""

    name: str
    measured: float | None
    threshold: float
    comparison: str  # "<=" or ">="
    unit: str
    passed: bool

    def describe(self) -> str:
        shown = "missing" if self.measured is None else f"{self.measured:.4g}"
        verdict = "ok" if self.passed else "FAILED"
        return f"{self.name} = {shown} {self.unit} (must be {self.comparison} {self.threshold:g}) {verdict}"


@dataclass(frozen=True)
class GateDecision:
    passed: bool
    criteria: tuple[Criterion, ...]

    @property
    def failed(self) -> tuple[Criterion, ...]:
        return tuple(criterion for criterion in self.criteria if not criterion.passed)

    @property
    def metrics(self) -> dict:
        """The decision as the gate stage's manifest metrics."""
        return self.as_dict()

    def as_dict(self) -> dict:
        return {"passed": self.passed, "criteria": [asdict(criterion) for criterion in self.criteria]}


def _number(metrics: dict, key: str) -> float | None:
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _criterion(name: str, measured: float | None, threshold: float, comparison: str, unit: str) -> Criterion:
    if measured is None:
        passed = False
    elif comparison == "<=":
        passed = measured <= threshold
    else:
        passed = measured >= threshold
    return Criterion(name, measured, threshold, comparison, unit, passed)


def decide(policy: GatePolicy, metrics: dict) -> GateDecision:
    """Apply `policy` to the evaluation metrics."""
    fp32, int8 = _number(metrics, "fp32_top1_pct"), _number(metrics, "int8_top1_pct")
    drop = None if fp32 is None or int8 is None else fp32 - int8
    criteria = (
        _criterion("accuracy_drop_pts", drop, policy.max_accuracy_drop, "<=", "pts"),
        _criterion("agreement", _number(metrics, "agreement"), policy.min_agreement, ">=", "fraction"),
        _criterion("int8_top1_pct", int8, policy.min_int8_accuracy, ">=", "%"),
    )
    return GateDecision(passed=all(criterion.passed for criterion in criteria), criteria=criteria)


def gate(policy: GatePolicy, evaluation_metrics: dict, out_dir: Path) -> GateDecision:
    """Decide and write the decision with the policy to `out_dir/gate.json`."""
    decision = decide(policy, evaluation_metrics)
    record = {**decision.as_dict(), "policy": policy.model_dump(mode="json")}
    (Path(out_dir) / GATE_FILE).write_text(json.dumps(record, sort_keys=True, indent=2) + "\n")
    return decision
