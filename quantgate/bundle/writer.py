"""Writing a bundle: a passed version's models, records and card, copied into a staging folder beside
the target, checked as `quantgate predict` will check it, then renamed into place in one step.

A reader sees no bundle or a whole one; a refused or failed bundle leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from quantgate.artifacts import ArtifactStore, VersionRef
from quantgate.bundle.copying import copy_stage_file, created_by, task_keys, task_records, written
from quantgate.bundle.latencies import LATENCIES, latency_record
from quantgate.bundle.layout import (
    BUNDLE_FILE,
    DEFAULT_RUNTIME,
    FORMAT,
    FORMAT_VERSION,
    MODEL_CARD_JSON,
    MODEL_CARD_MD,
    PREPROCESSING_FILE,
    RUNTIMES_NOT_APPLICABLE,
)
from quantgate.bundle.manifest import canonical_json, fsync_folder, fsync_tree, sealed_json, write_new
from quantgate.bundle.model_card import build_card, render_markdown
from quantgate.bundle.sources import VersionSources, read_sources
from quantgate.bundle.system_sources import SystemSources, is_system_version, read_system_sources
from quantgate.bundle.system_writer import fill_system
from quantgate.bundle.verify import VerifiedBundle, open_bundle
from quantgate.errors import BadInput

STAGING_PREFIX = ".bundle-staging-"


class OutputExists(BadInput):
    """The bundle's target folder already holds something; a bundle never overwrites (exit 2)."""


@dataclass(frozen=True)
class BundleResult:
    bundle: VerifiedBundle
    sources: VersionSources | SystemSources


def write_bundle(store: ArtifactStore, ref: VersionRef, out: Path) -> BundleResult:
    """Bundle the passed version `ref` into the new folder `out` (which may exist if empty).

    An OCR system's version (a "system" stage naming its components) is bundled with every component's models
    and records (system_writer.py); any other with its own.

    Raises:
        NotPassed: the version's gate (or, for a system, any component's) did not pass; nothing is written.
        OutputExists: `out` exists and is not an empty folder.
        CannotBundle: the version lacks a record a bundle needs, or a stored file changed while copied.
    """
    out = Path(out).expanduser().absolute()
    _check_target(out)
    # Refuses a version that did not pass before anything is written.
    system = is_system_version(store, ref)
    sources = read_system_sources(store, ref) if system else read_sources(store, ref)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f"{STAGING_PREFIX}{out.name}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        fill_system(staging, sources) if system else _fill(staging, sources)
        fsync_tree(staging)
        checked = open_bundle(staging)  # what predict will check, proven before the bundle appears
        _rename_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_folder(out.parent)
    return BundleResult(VerifiedBundle(out, checked.manifest), sources)


def _check_target(out: Path) -> None:
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise OutputExists(f"--out {out} already exists and is not an empty folder; a bundle never overwrites: "
                           "name a new folder, or remove this one first")


def _rename_into_place(staging: Path, out: Path) -> None:
    try:
        os.rename(staging, out)  # replaces an empty folder; refuses one that filled up meanwhile
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise OutputExists(f"--out {out} was filled by something else while the bundle was written; name a "
                               "new folder") from exc
        raise


def _fill(staging: Path, sources: VersionSources) -> None:
    """Copy each gated runtime's models, write the records and the card, then the sealed manifest (with each
    runtime's recorded latencies)."""
    files, origins, runtime_files = _copy_models(staging, sources)
    files.update(task_records(staging, sources))
    created_at = datetime.now(UTC).isoformat(timespec="seconds")
    lineage = {"store": str(sources.store.root), "model": sources.ref.model, "version": sources.ref.version,
               "version_record_sha256": sources.record.get("record_sha256"), "decision": sources.decision,
               "stages": sources.record.get("stages", {}), "sources": origins}
    card = build_card(sources, files, lineage, runtime_files, created_at)
    files[MODEL_CARD_JSON] = written(staging / MODEL_CARD_JSON, canonical_json(card))
    files[MODEL_CARD_MD] = written(staging / MODEL_CARD_MD, render_markdown(card).encode("utf-8"))
    evaluate_config = sources.manifests["evaluate"].get("config") or {}
    evaluation = card["evaluation"]
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "created_at": created_at,
        "created_by": created_by(),
        "model": sources.ref.model, "version": sources.ref.version, "architecture": card["model"]["architecture"],
        "input": {"shape": card["model"]["input_shape"], "dtype": "float32", "layout": "NCHW"},
        # A model trained elsewhere may end in softmax: predict then shows its outputs as they are.
        "outputs": sources.output_kind,
        "runtimes": runtime_files,
        "default_runtime": DEFAULT_RUNTIME if DEFAULT_RUNTIME in runtime_files else sources.runtimes[0],
        # Runtimes the evaluation found not applicable (Paddle Inference for a PIR model: no Paddle INT8 program):
        # nothing of theirs is shipped, and predict says why when one is asked for.
        **({RUNTIMES_NOT_APPLICABLE: sources.not_applicable} if sources.not_applicable else {}),
        # How the gate ran the models; predict runs them the same way, so it reproduces the stored predictions.
        "evaluated_with": {"batch_size": evaluate_config.get("batch_size"), "threads": evaluate_config.get("threads")},
        # What predict ranks the runtimes by when none is named: the run's own latencies, on the run's machine.
        LATENCIES: latency_record(evaluation["runtimes"], evaluation.get("cpu"), evaluate_config.get("threads"),
                                  evaluation.get("latency_batch_size")),
        **task_keys(sources.task),
        "preprocessing": PREPROCESSING_FILE, "model_card": [MODEL_CARD_MD, MODEL_CARD_JSON],
        "gate": {"passed": True, "verdict": sources.verdict, "runtimes": card["gate"]["runtimes"]},
        "lineage": lineage,
        "files": files,
    }
    write_new(staging / BUNDLE_FILE, sealed_json(manifest))


def _copy_models(staging: Path, sources: VersionSources) -> tuple[dict, dict, dict]:
    """Each gated runtime's model files copied in; their {path: sha256, bytes}, {path: origin} and
    {runtime: {precision: [paths]}}. A copy whose bytes are not what the stage recorded is refused."""
    files, origins, runtime_files = {}, {}, {}
    for runtime in sources.runtimes:
        runtime_files[runtime] = {}
        for precision, model_files in sources.model_files(runtime).items():
            for model_file in model_files:
                entry = copy_stage_file(staging, sources, model_file.stage, model_file.file, model_file.path)
                files[model_file.path] = entry
                origins[model_file.path] = {"stage": model_file.stage, "file": model_file.file,
                                            "sha256": entry["sha256"]}
            runtime_files[runtime][precision] = [model_file.path for model_file in model_files]
    return files, origins, runtime_files
