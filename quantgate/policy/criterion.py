"""One criterion of the release policy with its measured value and verdict, and the rules every criterion
follows: a value that is missing or not a finite number fails; "not_applicable" says why and does not block."""

from __future__ import annotations

import math
from dataclasses import dataclass

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "not_applicable"


@dataclass(frozen=True)
class Criterion:
    """One rule of the policy with the value this run measured.

    `verdict` is "pass", "fail" or "not_applicable" (which does not block); left empty it is
    derived from `passed`. `note` says why a value is missing, stale or not applicable.
    """

    name: str
    measured: float | None
    threshold: float
    comparison: str  # "<=" or ">="
    unit: str
    passed: bool
    verdict: str = ""
    note: str = ""

    def __post_init__(self):
        if not self.verdict:
            object.__setattr__(self, "verdict", PASS if self.passed else FAIL)

    def describe(self) -> str:
        if self.verdict == NOT_APPLICABLE and self.measured is None:
            return f"{self.name}: not applicable ({self.note})"
        shown = "missing" if self.measured is None else f"{self.measured:.4g}"
        verdict = {PASS: "ok", FAIL: "FAILED", NOT_APPLICABLE: "not applicable"}[self.verdict]
        text = f"{self.name} = {shown} {self.unit} (must be {self.comparison} {self.threshold:g}) {verdict}"
        return f"{text}: {self.note}" if self.note else text


def number(metrics: dict, key: str) -> float | None:
    """`metrics[key]` as a float, or None when it is missing, a bool or not finite."""
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def criterion(name: str, measured: float | None, threshold: float, comparison: str, unit: str,
              note: str = "") -> Criterion:
    """A criterion judged on `measured`; a missing or non-finite value fails (fail closed)."""
    if measured is None or not math.isfinite(measured):
        return Criterion(name, None, threshold, comparison, unit, False, note=note or "no finite value measured")
    passed = measured <= threshold if comparison == "<=" else measured >= threshold
    return Criterion(name, measured, threshold, comparison, unit, passed, note=note)


def not_applicable(name: str, threshold: float, comparison: str, unit: str, note: str,
                   measured: float | None = None) -> Criterion:
    """A criterion that cannot apply here, saying why; it does not block."""
    return Criterion(name, measured, threshold, comparison, unit, True, NOT_APPLICABLE, note)


