"""Provenance checks: does a stage still belong to the inputs its manifest recorded?"""

from collections.abc import Callable
from pathlib import Path

from .errors import ArtifactError
from .names import StageRef


def walk_lineage(ref: StageRef, read_manifest: Callable[[StageRef], dict],
                 stage_dir: Callable[[str, str, str], Path]) -> list[str]:
    """Problems found reading `ref` and, transitively, every input its manifests record; [] if none.

    `read_manifest` must verify the stage against the ref (digest of manifest.json and of every
    file) and raise an ArtifactError otherwise; `stage_dir` maps (model, version, stage) to a folder.
    """
    problems: list[str] = []
    seen: set[StageRef] = set()
    pending = [ref]
    while pending:
        current = pending.pop()
        try:
            manifest = read_manifest(current)
        except ArtifactError as exc:
            problems.append(str(exc))
            continue
        for name, recorded in sorted(manifest.get("inputs", {}).items()):
            try:
                model, version, stage = recorded["model"], recorded["version"], recorded["stage"]
                input_ref = StageRef(model, version, stage, str(stage_dir(model, version, stage)),
                                     recorded["manifest_sha256"])
            except (ArtifactError, KeyError, TypeError) as exc:
                problems.append(f"stage {current.stage!r} of {current.version} records an unusable input {name!r} ({exc!r})")
                continue
            if input_ref not in seen:
                seen.add(input_ref)
                pending.append(input_ref)
    return problems
