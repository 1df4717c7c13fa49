"""Publishing a version, for every flow that makes one: its record's provenance, the record of a failed run, and the
compare-and-set publish loop that judges the version again when `release` moved after its gate read it.

The release flow and the OCR-system flow both end here; they differ only in how a version is judged against a
newer release (`ReleaseCriteria`): the release flow scores that release on the version's test samples, the system
flow reads stored page reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from quantgate.artifacts import LATEST, RELEASE, ArtifactError, ArtifactExists, ArtifactStore, StageRef, VersionRef
from quantgate.artifacts.decisions import EVALUATE_DIGEST
from quantgate.artifacts.errors import AliasMoved
from quantgate.artifacts.names import version_number
from quantgate.config import PipelineConfig
from quantgate.errors import Rejected
from quantgate.flows.duel import current_release
from quantgate.flows.report import publish_report
from quantgate.memory.record import MEMORY, memory_record
from quantgate.policy.criterion import Criterion
from quantgate.policy.runtimes import RUNTIMES, with_criterion, with_verdicts
from quantgate.stages.data.outputs import FINGERPRINT, PREPROCESSING
from quantgate.stages.gate.outputs import PASSED, RELEASE_DUEL

# (release as read now, why it could not be read) -> the criteria against that release, and the duel's summary
ReleaseCriteria = Callable[[str | None, str], tuple[list[Criterion], dict | None]]


class GateFailed(Rejected):
    """The INT8 model did not meet the release policy; `criteria` holds every failed rule (exit 1)."""

    def __init__(self, model: str, version: str, criteria: list[str]):
        self.model = model
        self.version = version
        self.criteria = list(criteria)
        super().__init__(
            f"release gate failed for {model}/{version}: " + "; ".join(self.criteria)
            + ". The version is kept for inspection and 'release' was not moved."
        )


def provenance(manifests: dict[str, dict], config: PipelineConfig) -> dict:
    """What every version record says besides its verdict: the data, the pre-processing, each stage's time,
    reuse and memory, and the config."""
    return {
        "data_fingerprint_sha256": manifests["data"]["metrics"][FINGERPRINT],
        "preprocessing": manifests["data"]["metrics"].get(PREPROCESSING),
        "stage_seconds": {stage: manifest["duration_s"] for stage, manifest in manifests.items()},
        "reused": {stage: manifest["reused_from"]["version"] for stage, manifest in manifests.items()
                   if manifest.get("reused_from")},
        MEMORY: memory_of(manifests),
        "config": config.model_dump(mode="json"),
    }


def memory_of(manifests: dict[str, dict]) -> dict:
    """The stages' peaks, batches and budget as the version record keeps them (quantgate/memory/record.py)."""
    return memory_record({stage: (manifest["metrics"], (manifest.get("reused_from") or {}).get("version"))
                          for stage, manifest in manifests.items()})


def record_error(store: ArtifactStore, version: VersionRef, config: PipelineConfig, exc: Exception) -> None:
    """Mark the version as errored, so it never looks complete; keep what its stages committed.

    The exception gets `version_ref`, so the CLI can say where the run's log and record are.
    """
    exc.version_ref = version
    try:
        store.finalize_version(
            version, {"status": "error", "error": f"{type(exc).__name__}: {exc}", "config": config.model_dump(mode="json")}
        )
        exc.add_note(f"version {version.model}/{version.version} is recorded with status 'error' in "
                     f"{store.version_location(version)}")
    except ArtifactExists:
        pass  # publish finalized it before failing; that record stands
    except ArtifactError as record_failed:  # e.g. the disk is still full: the version stays 'incomplete'
        exc.add_note(f"version {version.model}/{version.version} stays incomplete ({record_failed})")


def rejudged(record: dict, release: str | None, problem: str, criteria_against: ReleaseCriteria) -> dict:
    """`record` with the criteria against the release judged against `release` as it is now, if the gate saw
    another (`criteria_against` judges them; `problem`: why the release alias could not be read).

    The gate read `release` long before publishing; another run may have moved it since. A passing
    run is judged again against the new release; if that fails, the record says "failed", carries
    the new criteria and says why, and `release` stays where it is.
    """
    gate_record = record["gate"]
    judged = (gate_record.get(RELEASE_DUEL) or {}).get("version")
    if record["status"] != "passed" or (judged == release and not problem):
        return record
    fresh, summary = criteria_against(release, problem)
    note = f"judged again: release moved from {judged or 'none'} to {release or 'none'} after this run's gate read it"
    fresh = [replace(c, note=f"{c.note}; {note}" if c.note else note) for c in fresh]
    gate_record = {**with_criterion(gate_record, *fresh), RELEASE_DUEL: summary, "rejudged": note}
    # The per-runtime verdicts follow the criteria they summarise.
    runtimes_record = {RUNTIMES: with_verdicts(record[RUNTIMES], gate_record)} if RUNTIMES in record else {}
    return {**record, **runtimes_record, "gate": gate_record, "status": "passed" if gate_record[PASSED] else "failed"}


def publish_judged(store: ArtifactStore, version: VersionRef, judge: Callable[[str | None, str], dict]) -> dict:
    """Finalize the version with `judge(release, problem)`'s record and move `latest` and `release`.

    `judge` gets `release` as read now (and why it could not be read) and returns the record judged against
    it, outside the alias lock. Under the model's alias lock `release` is read again: if it moved meanwhile,
    the lock is let go and the loop judges the newer one; otherwise the version is finalized, `latest` moved
    unless it already names a newer version, and `release` moved (compare-and-set) only if the record passes.
    """
    finalized = False
    while True:
        release_seen, problem = current_release(store, version.model)
        judged = judge(release_seen, problem)
        try:
            with store.alias_moves(version.model) as moves:
                release_now = moves.current(RELEASE)
                if release_now != release_seen and not problem:
                    continue  # moved while this run scored it: score the newer one, outside the lock
                if not finalized:
                    store.finalize_version(version, judged)
                    finalized = True
                else:  # judged again after another worker's move: the newest decision is what counts
                    store.record_decision(version, rejudged_decision(store, version, judged))
                latest = moves.current(LATEST)
                if latest is None or version_number(latest) < version_number(version.version):
                    moves.move(LATEST, version.version, reason=f"run finished: gate {judged['status']}")
                if judged["status"] == "passed":
                    moves.move(RELEASE, version.version, reason="gate passed", expected_previous=release_now)
        except AliasMoved:
            # Only a shared store (S3) has no lock to hold: another worker's move committed between this
            # block's read and its own commit. Read `release` again, judge again, and try again.
            continue
        return judged


def rejudged_decision(store: ArtifactStore, version: VersionRef, judged: dict) -> dict:
    """The decision a publish records when it judged its version again after the record was finalized."""
    decision = {"gate": judged.get("gate", {}), "status": judged["status"],
                "why": "judged again at publish: another worker moved an alias after this version was finalized"}
    if "evaluate" in store.version_record(version).get("stages", {}):
        decision[EVALUATE_DIGEST] = store.finalized_stage_ref(version, "evaluate").manifest_sha256
    return decision


def published(artifact_store: ArtifactStore, version: VersionRef, record: dict, refs: dict[str, StageRef]) -> str:
    """Publish the run's report as a Prefect artifact; raise GateFailed unless the gate passed."""
    publish_report(version, record, artifact_store.alias(version.model, RELEASE),
                   artifact_store.verify_stage(refs["report"]))
    if record["status"] != "passed":
        failed = [Criterion(**criterion) for criterion in record["gate"]["criteria"] if not criterion["passed"]]
        failure = GateFailed(version.model, version.version, [criterion.describe() for criterion in failed])
        failure.version_ref = version
        raise failure
    return version.version
