"""Whether a stored version may become `release`: its newest gate decision, verified; and `Refused`.

`promote` and `rollback` both move `release`, and both only to a version this says passed.
"""

from __future__ import annotations

from quantgate.errors import Rejected


class Refused(Rejected):
    """An alias move was refused because the target's gate did not pass (or cannot be trusted)."""


def gate_verdict(store, ref) -> tuple[bool, str]:
    """Whether the version's newest decision passed, and what it was; fails closed on anything unverifiable."""
    from quantgate.artifacts import ArtifactError
    from quantgate.flows.evidence import gate_evidence
    from quantgate.stages.gate.outputs import CRITERIA, PASSED

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
    failed = [c["name"] for c in gate_record.get(CRITERIA, []) if not c.get("passed")]
    passed = gate_record.get(PASSED) is True and not failed
    return passed, f"{source}: {'passed' if passed else 'failed ' + ', '.join(failed or ['(no verdict)'])}"
