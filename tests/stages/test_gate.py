import json
import math

from quantgate.config import GatePolicy
from quantgate.stages.gate import decide, gate

GOOD = {"fp32_top1_pct": 97.5, "int8_top1_pct": 97.0, "agreement": 0.99}


def test_a_model_within_policy_passes(tmp_path):
    decision = gate(GatePolicy(), GOOD, tmp_path)
    assert decision.passed and not decision.failed
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["passed"] is True and record["policy"]["max_accuracy_drop"] == 1.0
    assert {c["name"] for c in record["criteria"]} == {"accuracy_drop_pts", "agreement", "int8_top1_pct"}


def test_each_failed_criterion_is_named_with_value_and_threshold():
    decision = decide(GatePolicy(max_accuracy_drop=0.25, min_agreement=0.995), GOOD)
    assert not decision.passed
    described = [criterion.describe() for criterion in decision.failed]
    assert described == [
        "accuracy_drop_pts = 0.5 pts (must be <= 0.25) FAILED",
        "agreement = 0.99 fraction (must be >= 0.995) FAILED",
    ]


def test_missing_or_nan_metrics_fail_closed():
    for broken in ({**GOOD, "agreement": math.nan}, {k: v for k, v in GOOD.items() if k != "int8_top1_pct"},
                   {**GOOD, "fp32_top1_pct": "97"}, {**GOOD, "agreement": None}):
        decision = decide(GatePolicy(max_accuracy_drop=100, min_agreement=0), broken)
        assert not decision.passed
        assert any(criterion.measured is None for criterion in decision.failed)
