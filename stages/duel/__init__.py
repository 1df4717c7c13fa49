"""Duel stage: the current release scored on this version's unseen test samples, in every runtime, paired
with this version's predictions, so the gate compares two models on the same images (champion vs challenger)."""

from quantgate.stages.duel.outputs import OUTPUTS as OUTPUTS
from quantgate.stages.shared.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "DuelResult": "pairing", "ReleaseModel": "pairing", "PredictionCache": "pairing", "duel": "pairing",
    "ReleaseIncomparable": "scoring",
})
