"""What an OCR system's bundle is made from, read through the store's public API: the system version's record and
gate verdict, its system.json (which versions it is made of, drop_score, cls_thresh), and each component's own
sources (`read_sources`), so each component is bundled only while its own gate still passes.

A system runs its components' convert-stage ONNX models (stages/system/evaluate.py), in the runtimes its evaluate
stage read the pages with; the bundle holds exactly those.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from quantgate.artifacts import ArtifactError, ArtifactStore, VersionRef
from quantgate.bundle.layout import (
    DETECTOR,
    KNOWN_RUNTIMES,
    RECOGNIZER,
    SYSTEM_FILE,
    SYSTEM_RUNTIMES,
    SYSTEM_STAGE,
)
from quantgate.bundle.sources import CannotBundle, NotPassed, VersionSources, read_sources, refuse_unless_passed
from quantgate.ocr.combos import COMPONENT_TASKS

# The system's components, in the order a page passes through them, and the task each must have been gated as.
REQUIRED = (DETECTOR, RECOGNIZER)
# The system version's stages a bundle reads: the record of its components, and the card's evidence.
STAGES = (SYSTEM_STAGE, "data", "evaluate", "gate")


@dataclass(frozen=True)
class SystemSources:
    """A passed OCR system version's records, its stages' verified manifests and folders, and its components."""

    store: ArtifactStore
    ref: VersionRef
    record: dict
    verdict: str  # why the system may be released, as `ArtifactStore.release_verdict` says
    gate: dict  # the gate record behind that verdict: the newest decision's, else the run's own
    decision: int | None
    manifests: dict[str, dict]
    folders: dict[str, Path]
    system: dict  # system.json
    components: dict[str, VersionSources | None]  # {detector, classifier, recognizer}; None: not in the system
    runtimes: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.ref.model}/{self.ref.version}"

    def metrics(self, stage: str) -> dict:
        return self.manifests[stage]["metrics"]

    def recorded_sha256(self, stage: str, name: str) -> str:
        return self.manifests[stage]["files"][name]["sha256"]


def is_system_version(store: ArtifactStore, ref: VersionRef) -> bool:
    """Whether `ref` is an OCR system's version: its record lists a system stage (a run that did not finish has
    no record and is refused by the usual checks)."""
    try:
        return SYSTEM_STAGE in (store.version_record(ref).get("stages") or {})
    except ArtifactError:
        return False


def read_system_sources(store: ArtifactStore, ref: VersionRef) -> SystemSources:
    """Everything a system's bundle needs, once the system's gate and each component's passed.

    Raises:
        NotPassed: the system's effective verdict is not a pass, or a component's is not (now).
        CannotBundle: a stage is missing or damaged, system.json does not name a detector and a recognizer of
            the right tasks, or the system was read in no runtime a bundle can run.
    """
    label, why = refuse_unless_passed(store, ref)
    try:
        record = store.version_record(ref)
        decisions = store.decisions(ref)
        refs = {stage: store.finalized_stage_ref(ref, stage) for stage in STAGES
                if stage in (record.get("stages") or {}) or stage == SYSTEM_STAGE}
        manifests = {stage: store.read_manifest(stage_ref) for stage, stage_ref in refs.items()}
        folders = {stage: Path(stage_ref.path) for stage, stage_ref in refs.items()}
    except ArtifactError as exc:
        raise CannotBundle(f"cannot bundle {label}: {exc}") from exc
    recorded = manifests[SYSTEM_STAGE]["files"].get(SYSTEM_FILE, {}).get("sha256")
    data = (folders[SYSTEM_STAGE] / SYSTEM_FILE).read_bytes() if recorded else b""
    if not recorded or hashlib.sha256(data).hexdigest() != recorded:
        raise CannotBundle(f"cannot bundle {label}: its {SYSTEM_STAGE} stage's {SYSTEM_FILE} is missing or changed "
                           "while it was read; run `quantgate fsck`")
    system = json.loads(data)
    for key in ("drop_score", "cls_thresh"):
        if not isinstance(system.get(key), (int, float)) or isinstance(system.get(key), bool):
            raise CannotBundle(f"cannot bundle {label}: its {SYSTEM_FILE} records no {key} ({system.get(key)!r}); "
                               "run the system again")
    components = _components(store, label, system)
    return SystemSources(
        store=store, ref=ref, record=record, verdict=why,
        gate=decisions[-1]["gate"] if decisions else record.get("gate", {}),
        decision=decisions[-1].get("decision") if decisions else None,
        manifests=manifests, folders=folders, system=system, components=components,
        runtimes=_runtimes(label, manifests, components),
    )


def _components(store: ArtifactStore, label: str, system: dict) -> dict[str, VersionSources | None]:
    """Each component's sources, once it is named with the right task and its own gate passes now."""
    named = system.get("components")
    if not isinstance(named, dict):
        raise CannotBundle(f"cannot bundle {label}: its {SYSTEM_FILE} names no components; run the system again")
    components = {}
    for role, task in COMPONENT_TASKS.items():
        entry = named.get(role)
        if entry is None and role not in REQUIRED:
            components[role] = None
            continue
        if not isinstance(entry, dict) or not entry.get("model") or not entry.get("version"):
            raise CannotBundle(f"cannot bundle {label}: its {SYSTEM_FILE} names no {role} version ({entry!r}); run "
                               "the system again")
        component = f"{entry['model']}/{entry['version']}"
        try:
            ref = store.version(entry["model"], entry["version"])
            passed, why = store.release_verdict(ref)
            if not passed:
                raise NotPassed(f"refusing to bundle {label}: its {role} {component} may not be released ({why}); "
                                f"decide it again with `quantgate gate {entry['version']} --model {entry['model']}`, "
                                f"or run the system again with a {role} that passes; nothing was written")
            sources = read_sources(store, ref)
        except (ArtifactError, CannotBundle) as exc:
            raise CannotBundle(f"cannot bundle {label}: its {role} {component}: {exc}") from exc
        if sources.task != task:
            raise CannotBundle(f"cannot bundle {label}: its {role} {component} is a {sources.task} model, not "
                               f"{task}; run the system again with a {task} model")
        components[role] = sources
    return components


def _runtimes(label: str, manifests: dict[str, dict], components: dict[str, VersionSources | None]
              ) -> tuple[str, ...]:
    """The runtimes the system's evaluation read the pages in (all of them ONNX runtimes a bundle can run)."""
    evaluated = manifests.get("evaluate", {}).get("metrics", {}).get("runtimes")
    runtimes = tuple(evaluated) if isinstance(evaluated, dict) and evaluated else (
        tuple(runtime for runtime in SYSTEM_RUNTIMES
              if all(runtime in part.runtimes for part in components.values() if part is not None)))
    unknown = [runtime for runtime in runtimes if runtime not in KNOWN_RUNTIMES or runtime not in SYSTEM_RUNTIMES]
    if unknown or not runtimes:
        raise CannotBundle(f"cannot bundle {label}: it was read in {', '.join(runtimes) or 'no runtime'}, but a "
                           f"system's bundle runs {', '.join(SYSTEM_RUNTIMES)}; upgrade quantgate")
    return runtimes
