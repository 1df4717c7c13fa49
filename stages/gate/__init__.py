"""Gate stage: a pure `decide` over measured criteria, and `gate` that writes the decision."""

from quantgate.stages.gate.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "Criterion": "decision", "GateDecision": "decision", "ReleaseDuel": "decision", "decide": "decision",
    "gate": "decision",
})
