"""Duel stage: the current release (the champion) and this version (the challenger) on the same test samples.

The samples are this version's test split less every sample either version trained, calibrated or
validated on (by content: quantgate/samples/sample_ids.py). The release's INT8 predictions on them come, in
this order, from the release's own stored evaluation when it holds every one of those samples (its
predictions name their samples), from the release-predictions cache, or from running the release's
model now with its own pre-processing; this version's come from its evaluation. The gate judges the
paired numbers; a release that cannot be scored is recorded as incomparable, with the reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from quantgate.policy.release_duel import paired_numbers
from quantgate.runtimes.forms import library
from quantgate.samples.reading import StoredData, open_data
from quantgate.samples.sample_ids import sample_ids, sample_sources, seen_sources
from quantgate.stages.data.outputs import FINGERPRINT
from quantgate.stages.duel import outputs as out
from quantgate.stages.duel.scoring import ReleaseIncomparable, model_files_digest, preprocessing_of, score_release
from quantgate.stages.evaluate.outputs import (
    PREDICTIONS_FILE_KEY,
    PRIMARY_RUNTIME,
    RUNTIMES_NOT_APPLICABLE,
    SAMPLE_IDS,
    primary_runtime,
    runtime_predictions_file,
)
from quantgate.stages.evaluate.outputs import RUNTIMES as EVALUATED_RUNTIMES
from quantgate.tasks import CLASSIFICATION

log = logging.getLogger(__name__)
TEST = "test"


class PredictionCache(Protocol):
    """The store's content cache as the duel uses it (artifacts.ContentCache): verified entries by digest."""

    def get(self, digest: str) -> Path | None: ...

    def fill(self, digest: str) -> AbstractContextManager[Path]: ...


@dataclass(frozen=True)
class ReleaseModel:
    """The release's stage folders, verified by the caller; `problem` says why it cannot be scored at all.

    `evaluate_dir` is None when its stored predictions must not be reused (e.g. its inputs changed since).
    """

    version: str
    data_dir: Path | None = None
    data_metrics: dict = field(default_factory=dict)
    convert_dir: Path | None = None
    export_dir: Path | None = None
    quantize_dir: Path | None = None
    evaluate_dir: Path | None = None
    evaluation: dict = field(default_factory=dict)  # its evaluate manifest's metrics
    problem: str = ""
    model_problem: str = ""  # why its model cannot run (its stored predictions may still serve)


@dataclass(frozen=True)
class DuelResult:
    metrics: dict


def unseen_rows(candidate: StoredData, release: StoredData) -> tuple[np.ndarray, dict[str, int]]:
    """The candidate's test rows that neither version saw outside its test split, and how many were dropped."""
    by_release, by_candidate = seen_sources(release), seen_sources(candidate)
    kept, release_saw, candidate_saw, dropped = [], 0, 0, 0
    for row, sources in enumerate(sample_sources(candidate, TEST)):
        seen_release, seen_candidate = bool(sources & by_release), bool(sources & by_candidate)
        release_saw += seen_release
        candidate_saw += seen_candidate
        dropped += seen_release or seen_candidate
        if not (seen_release or seen_candidate):
            kept.append(row)
    counts = {out.DROPPED_OVERLAP: dropped, out.DROPPED_SEEN_BY_RELEASE: release_saw,
              out.DROPPED_SEEN_BY_CANDIDATE: candidate_saw}
    return np.asarray(kept, np.int64), counts


def class_mapping(release: StoredData, candidate: StoredData) -> np.ndarray | None:
    """release class index -> candidate class index (None for text lines).

    Raises:
        ReleaseIncomparable: the class sets differ (the added and removed classes named).
    """
    if candidate.task.name != release.task.name:
        raise ReleaseIncomparable(f"the release is {release.task.name}, this version {candidate.task.name}")
    if candidate.task.name != CLASSIFICATION:
        return None
    old, new = release.classes, candidate.classes
    if set(old) != set(new) or len(old) != len(new):
        added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
        raise ReleaseIncomparable(f"the class set changed: added {added or 'none'}, removed {removed or 'none'}")
    return np.asarray([new.index(name) for name in old], np.int64)


def _stored_predictions(release: ReleaseModel, runtime: str, ids: np.ndarray) -> np.ndarray | None:
    """The release's own INT8 predictions of `ids` in `runtime`, when its evaluation names every one of them."""
    if release.evaluate_dir is None:
        return None
    primary = release.evaluation.get(PRIMARY_RUNTIME) or primary_runtime(release.evaluation.get(EVALUATED_RUNTIMES)
                                                                         or ())
    entry = (release.evaluation.get(EVALUATED_RUNTIMES) or {}).get(runtime)
    if runtime != primary and not entry:
        return None
    name = runtime_predictions_file(runtime, primary) if runtime == primary else entry.get(PREDICTIONS_FILE_KEY)
    try:
        with np.load(Path(release.evaluate_dir) / str(name), allow_pickle=False) as stored:
            if SAMPLE_IDS not in stored.files:  # evaluated before predictions named their samples: re-score
                return None
            stored_ids, predicted = stored[SAMPLE_IDS], stored["int8_pred"]
    except (OSError, ValueError, KeyError):
        return None
    where = {sample: row for row, sample in enumerate(stored_ids)}
    if len(stored_ids) != len(predicted) or any(sample not in where for sample in ids):
        return None
    return predicted[[where[sample] for sample in ids]] if len(ids) else predicted[:0]


def _cache_key(runtime: str, release: ReleaseModel, spec: dict, ids: np.ndarray) -> str:
    models = model_files_digest(runtime, release.convert_dir, release.export_dir, release.quantize_dir)
    samples = hashlib.sha256("\n".join(ids.tolist()).encode()).hexdigest()
    record = {"runtime": runtime, "library": library(runtime), "model_files_sha256": models,
              "preprocessing": preprocessing_of(spec), "samples_sha256": samples}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _cached(cache: PredictionCache | None, key: str | None, ids: np.ndarray) -> np.ndarray | None:
    entry = cache.get(key) if cache is not None and key is not None else None
    if entry is None:
        return None
    try:
        with np.load(entry / "predictions.npz", allow_pickle=False) as stored:
            if np.array_equal(stored[SAMPLE_IDS], ids):
                return stored["int8_pred"]
    except (OSError, ValueError, KeyError):
        pass
    return None


def release_predictions(release: ReleaseModel, spec: dict, runtime: str, candidate: StoredData, rows: np.ndarray,
                        ids: np.ndarray, batch_size: int | None, threads: int,
                        cache: PredictionCache | None) -> tuple[np.ndarray, str, int]:
    """The release's INT8 predictions of the candidate's `rows` in `runtime`, where they came from, and how
    many samples its model was run on here (see the module docstring)."""
    stored = _stored_predictions(release, runtime, ids)
    if stored is not None:
        return stored, out.FROM_EVALUATION, 0
    if release.model_problem or release.convert_dir is None:
        raise ReleaseIncomparable(release.model_problem or "the release's converted models were not given")
    try:
        key = _cache_key(runtime, release, spec, ids)
    except (OSError, TypeError, ValueError):
        key = None  # a missing model file: score_release names it
    cached = _cached(cache, key, ids)
    if cached is not None:
        return cached, out.FROM_CACHE, 0
    predicted = score_release(runtime, spec, release.data_dir, release.convert_dir, release.export_dir,
                              release.quantize_dir, candidate, rows, batch_size, threads)
    if cache is not None and key is not None:
        with cache.fill(key) as entry:
            np.savez(entry / "predictions.npz", **{SAMPLE_IDS: ids, "int8_pred": predicted})
    return predicted, out.SCORED, len(rows)


def _candidate_predictions(evaluate_dir: Path, evaluation: dict, runtime: str) -> np.ndarray:
    primary = evaluation.get(PRIMARY_RUNTIME) or primary_runtime(())
    entry = (evaluation.get(EVALUATED_RUNTIMES) or {}).get(runtime) or {}
    name = runtime_predictions_file(runtime, primary) if runtime == primary else entry.get(PREDICTIONS_FILE_KEY)
    try:
        with np.load(Path(evaluate_dir) / str(name), allow_pickle=False) as stored:
            return stored["int8_pred"]
    except (OSError, ValueError, KeyError) as exc:
        raise ReleaseIncomparable(f"this version's evaluation has no readable {runtime} predictions ({exc})") from exc


def duel(release: ReleaseModel, data_dir: Path, evaluate_dir: Path, evaluation: dict, runtimes: tuple[str, ...],
         out_dir: Path, batch_size: int | None = None, threads: int = 2,
         cache: PredictionCache | None = None) -> DuelResult:
    """Score `release` on this version's unseen test samples in every runtime of `runtimes`, pair them with this
    version's INT8 predictions (from `evaluate_dir`, whose manifest metrics are `evaluation`) and write one
    paired file per runtime into `out_dir`.

    A release that cannot be scored (its `problem`, a changed class set, a runtime that is not installed, a
    missing model, pre-processing that cannot apply) is recorded as incomparable with the reason; the gate
    decides what that means.

    Raises:
        DataError: `data_dir` is not a data stage's output.
        DataChanged: a test file changed since the data stage recorded it.
    """
    started = time.perf_counter()
    candidate = open_data(Path(data_dir))
    metrics = {out.RELEASE_VERSION: release.version, out.TASK: candidate.task.name,
               out.TEST_SAMPLES: candidate.size(TEST), out.RELEASE_DATA_FINGERPRINT:
               release.data_metrics.get(FINGERPRINT), out.RUNTIMES: {}, out.RELEASE_SCORING_S: 0.0}
    try:
        if release.problem:
            raise ReleaseIncomparable(release.problem)
        released = open_data(Path(release.data_dir))
        mapping = class_mapping(released, candidate)
        rows, dropped = unseen_rows(candidate, released)
        ids, references = sample_ids(candidate, TEST)[rows], candidate.references(TEST)[rows]
        metrics.update({**dropped, out.PAIRED_SAMPLES: len(rows),
                        out.PAIRED_FINGERPRINT: hashlib.sha256("\n".join(ids.tolist()).encode()).hexdigest()})
        # A runtime the evaluation found not applicable (Paddle Inference, a PIR model) has nothing to pair.
        for runtime in (name for name in runtimes if name not in (evaluation.get(RUNTIMES_NOT_APPLICABLE) or {})):
            metrics[out.RUNTIMES][runtime] = _one_runtime(release, released.spec, runtime, candidate, rows, ids,
                                                          references, mapping, evaluate_dir, evaluation, out_dir,
                                                          batch_size, threads, cache)
    except ReleaseIncomparable as exc:
        metrics.update({out.STATUS: out.INCOMPARABLE, out.PROBLEM: str(exc), out.RUNTIMES: {}})
        if "class set changed" in str(exc):
            metrics[out.CLASSES] = _class_change(release, candidate)
        return DuelResult(metrics)
    metrics[out.STATUS] = out.PAIRED
    metrics[out.RELEASE_SCORING_S] = sum(entry[out.SECONDS] for entry in metrics[out.RUNTIMES].values())
    log.info("duel: release %s vs this version on %d paired test samples (%d dropped as seen) in %.2f s",
             release.version, metrics[out.PAIRED_SAMPLES], metrics[out.DROPPED_OVERLAP], time.perf_counter() - started)
    return DuelResult(metrics)


def _class_change(release: ReleaseModel, candidate: StoredData) -> dict:
    old = open_data(Path(release.data_dir)).classes
    return {"added": sorted(set(candidate.classes) - set(old)), "removed": sorted(set(old) - set(candidate.classes))}


def _one_runtime(release, spec, runtime, candidate, rows, ids, references, mapping, evaluate_dir, evaluation,
                 out_dir, batch_size, threads, cache) -> dict:
    started = time.perf_counter()
    predicted, source, scored = release_predictions(release, spec, runtime, candidate, rows, ids, batch_size,
                                                    threads, cache)
    seconds = time.perf_counter() - started
    if mapping is not None:  # the release's class indices in this version's class order
        predicted = mapping[np.asarray(predicted, np.int64)]
    mine = _candidate_predictions(evaluate_dir, evaluation, runtime)
    if len(mine) != candidate.size(TEST):
        raise ReleaseIncomparable(f"this version's {runtime} predictions hold {len(mine)} rows, its test split "
                                  f"{candidate.size(TEST)}")
    mine = mine[rows]
    np.savez(Path(out_dir) / out.paired_file(runtime), rows=rows, sample_ids=ids, references=references,
             release_pred=predicted, candidate_pred=mine)
    return {out.PAIRED_FILE: out.paired_file(runtime), out.RELEASE_PREDICTIONS: source, out.SCORED_SAMPLES: scored,
            out.SECONDS: round(seconds, 4), **paired_numbers(references, predicted, mine, candidate.task.name)}
