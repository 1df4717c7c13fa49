"""Re-decisions of a finalized version: numbered, write-once records next to its stages.

<model>/versions/vN/decisions/0001.json, 0002.json, ... Each is created read-only by a
hard link that refuses an existing name, so records are appended, never replaced; the stage
folders and version.json they judge stay untouched. The highest number is the newest decision.
"""

import json
from pathlib import Path

from .errors import ArtifactCorrupt
from .layout import DECISIONS_DIR
from .manifest import sealed_json, utc_now, write_new_file


def _numbers(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit() and not p.name.startswith("."))


def append_decision(version_dir: Path, record: dict) -> Path:
    """Write `record` as the next numbered decision of the version; return its path."""
    folder = version_dir / DECISIONS_DIR
    folder.mkdir(exist_ok=True)
    number = max(_numbers(folder), default=0) + 1
    while True:
        target = folder / f"{number:04d}.json"
        try:
            write_new_file(target, sealed_json({**record, "decision": number, "decided_at": utc_now()}))
            return target
        except FileExistsError:
            number += 1  # another process took this number first


def read_decisions(version_dir: Path, store_root: Path) -> list[dict]:
    """The version's decisions, oldest first.

    Raises:
        ArtifactCorrupt: a decision file is not valid JSON.
    """
    folder = version_dir / DECISIONS_DIR
    decisions = []
    for number in _numbers(folder):
        path = folder / f"{number:04d}.json"
        try:
            decisions.append(json.loads(path.read_bytes()))
        except ValueError as exc:
            raise ArtifactCorrupt(
                f"decision {path.relative_to(store_root).as_posix()} is not valid JSON ({exc}); "
                "decide again with `quantgate gate`"
            ) from exc
    return decisions
