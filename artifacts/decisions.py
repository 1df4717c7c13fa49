"""Re-decisions of a finalized version, and the one rule for whether a version may be `release`.

<model>/versions/vN/decisions/0001.json, 0002.json, ... Each is sealed canonical JSON created
read-only by a hard link that refuses an existing name, so records are appended, never replaced;
the stage folders and version.json they judge stay untouched. The highest number is the newest.
Every read checks the seal, so a hand-edited decision is refused, never trusted.

`effective_verdict` is the rule `promote`, `rollback` and `fsck` all apply: the newest verified
decision, else the version's own record (which a publish that re-judged the run made honest).
"""

from pathlib import Path

from quantgate.gate_record import CRITERIA, PASSED

from .errors import ArtifactCorrupt, ArtifactError
from .layout import DECISIONS_DIR
from .lineage import walk_lineage
from .manifest import make_dir, read_sealed, sealed_json, utc_now, write_new_file
from .names import VersionRef
from .paths import stage_dir
from .reading import finalized_stage_ref, verified_stage, verify_finalized_version
from .versions import read_version_record

# The key of a decision naming the evaluate manifest it judged (written by `quantgate gate`).
EVALUATE_DIGEST = "evaluate_manifest_sha256"


def _numbers(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit() and not p.name.startswith("."))


def append_decision(version_dir: Path, record: dict) -> Path:
    """Write `record` as the next numbered decision of the version; return its path."""
    folder = version_dir / DECISIONS_DIR
    make_dir(folder)
    number = max(_numbers(folder), default=0) + 1
    while True:
        target = folder / f"{number:04d}.json"
        try:
            write_new_file(target, sealed_json({**record, "decision": number, "decided_at": utc_now()}))
            return target
        except FileExistsError:
            number += 1  # another process took this number first


def read_decisions(version_dir: Path, store_root: Path) -> list[dict]:
    """The version's decisions, oldest first, each verified against its seal.

    Raises:
        ArtifactCorrupt: a decision file is not valid sealed JSON, or carries no seal (edited by hand).
    """
    decisions = []
    for number in _numbers(version_dir / DECISIONS_DIR):
        path = version_dir / DECISIONS_DIR / f"{number:04d}.json"
        shown = path.relative_to(store_root).as_posix()
        hint = ("it is not trusted; run `quantgate fsck` to see what else changed, move the file aside "
                "and decide again with `quantgate gate`")
        record = read_sealed(path.read_bytes(), f"decision {shown}", hint)
        if "record_sha256" not in record:  # every decision the store wrote is sealed
            raise ArtifactCorrupt(f"decision {shown} carries no seal, so it was not written by the store; {hint}",
                                  kind="malformed-decision")
        decisions.append(record)
    return decisions


def _verdict(gate_record: object, source: str) -> tuple[bool, str]:
    gate_record = gate_record if isinstance(gate_record, dict) else {}
    criteria = gate_record.get(CRITERIA, [])
    failed = [str(c.get("name")) for c in criteria if isinstance(c, dict) and not c.get(PASSED)]
    passed = gate_record.get(PASSED) is True and not failed
    return passed, f"{source}: {'passed' if passed else 'failed ' + ', '.join(failed or ['(no verdict)'])}"


def effective_verdict(store_root: Path, ref: VersionRef) -> tuple[bool, str]:
    """Whether the finalized version `ref` may be `release`, and why; fails closed on anything unverifiable.

    The newest decision (`quantgate gate`), verified, must have passed and judged the evaluation the
    version holds; without decisions, version.json must say "passed" (and its gate record agree).
    The version's stages and the evaluation's inputs must all still be what was committed.
    """
    root = Path(store_root)
    try:
        pinned = read_version_record(root, ref.model, ref.version).get("stages", {})
        evaluated = finalized_stage_ref(root, ref, "evaluate") if "evaluate" in pinned else None
        if evaluated is not None:  # first: a changed input is named as such, not as a bare hash mismatch
            stale = walk_lineage(evaluated, lambda r: verified_stage(root, r)[1],
                                 lambda model, version, stage: stage_dir(root, model, version, stage))
            if stale:
                return False, "its evaluation cannot be trusted: " + "; ".join(stale)
        record = verify_finalized_version(root, ref)
        decisions = read_decisions(Path(ref.path), root)
    except ArtifactError as exc:
        return False, f"its gate record cannot be read or verified: {exc}"
    if decisions:
        last = decisions[-1]
        if evaluated is not None and last.get(EVALUATE_DIGEST) != evaluated.manifest_sha256:
            return False, f"decision {last.get('decision')} judged another evaluation than the stored one"
        return _verdict(last.get("gate"), f"decision {last.get('decision')} (quantgate gate)")
    if record.get("status") != "passed":
        passed, why = _verdict(record.get("gate"), "the run's gate")
        return False, why if not passed else f"the run's record says {record.get('status')!r}"
    if "gate" not in record:
        return True, "the run's record: passed"
    return _verdict(record["gate"], "the run's gate")
