"""Gate stage: a pure `decide` over measured criteria, and `gate` that writes the decision."""

from quantgate.stages.gate.decision import Criterion, GateDecision, ReleaseBaseline, decide, gate
from quantgate.stages.gate.outputs import OUTPUTS

__all__ = ["OUTPUTS", "Criterion", "GateDecision", "ReleaseBaseline", "decide", "gate"]
