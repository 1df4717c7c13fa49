"""The gate's comparison with the current release: both versions' INT8 predictions on the same test samples
(the duel stage's paired files), judged per runtime on the paired difference and its bootstrap interval.

Fails closed: no paired file, numbers the file does not reproduce, fewer samples than gate.min_paired_samples,
or a release that could not be scored (unless gate.incomparable_release is skip_with_note) fail the criterion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.policy.criterion import Criterion, criterion, not_applicable, number
from quantgate.policy.predictions import TOLERANCE, paired_bootstrap_delta
from quantgate.policy.runtimes import criterion_name
from quantgate.stages.duel import outputs as duel
from quantgate.stages.gate.outputs import RELEASE_CER_INCREASE, RELEASE_DUEL, RELEASE_REGRESSION
from quantgate.tasks import TEXT_RECOGNITION, scorer
from quantgate.tasks.text import character_error_rate_pct

__all__ = ["RELEASE_DUEL", "ReleaseDuel", "release_criteria"]
NO_RELEASE = "no release version yet, nothing to compare with"


def paired_numbers(references: np.ndarray, release_pred: np.ndarray, candidate_pred: np.ndarray,
                   task: str) -> dict:
    """Both models' accuracy (`task`'s: top-1, line accuracy or hmean) on the paired samples and the regression;
    for text also both CERs (None without samples)."""
    text = task == TEXT_RECOGNITION
    if not len(references):
        keys = (duel.RELEASE_INT8_TOP1, duel.CANDIDATE_INT8_TOP1, duel.REGRESSION)
        return dict.fromkeys((*keys, *((duel.RELEASE_INT8_CER, duel.CANDIDATE_INT8_CER, duel.CER_INCREASE)
                                       if text else ())))
    scoring = scorer(task)
    release_acc = scoring.scores(references, release_pred)["top1_pct"]
    candidate_acc = scoring.scores(references, candidate_pred)["top1_pct"]
    numbers = {duel.RELEASE_INT8_TOP1: release_acc, duel.CANDIDATE_INT8_TOP1: candidate_acc,
               duel.REGRESSION: release_acc - candidate_acc}
    if text:
        release_cer = character_error_rate_pct(references, release_pred)
        candidate_cer = character_error_rate_pct(references, candidate_pred)
        numbers.update({duel.RELEASE_INT8_CER: release_cer, duel.CANDIDATE_INT8_CER: candidate_cer,
                        duel.CER_INCREASE: candidate_cer - release_cer})
    return numbers


@dataclass(frozen=True)
class ReleaseDuel:
    """The duel stage's manifest metrics and {runtime: its paired file} as read and verified by the caller;
    `problem` says why they could not be (then nothing is judged and every criterion fails)."""

    version: str
    metrics: dict = field(default_factory=dict)
    paired: Mapping[str, Path | None] = field(default_factory=dict)
    problem: str = ""


def _statement(record: dict) -> str:
    """ "paired on N samples (...)" for the record and the report."""
    dropped, test = record.get(duel.DROPPED_OVERLAP, 0), record.get(duel.TEST_SAMPLES)
    fingerprint = str(record.get(duel.PAIRED_FINGERPRINT) or "")[:12]
    return (f"paired on {record.get(duel.PAIRED_SAMPLES)} samples (sha256 {fingerprint}…; {dropped} of {test} test "
            f"samples dropped as seen in training, calibration or validation: "
            f"{record.get(duel.DROPPED_SEEN_BY_RELEASE, 0)} by the release, "
            f"{record.get(duel.DROPPED_SEEN_BY_CANDIDATE, 0)} by this version)")


def _read(path: Path | None) -> dict | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {key: stored[key] for key in duel.PAIRED_KEYS}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _checked(record: dict, arrays: dict, task: str) -> tuple[dict, list[str]]:
    """The paired numbers recomputed from the file, and where they differ from the recorded ones."""
    numbers = paired_numbers(arrays["references"], arrays["release_pred"], arrays["candidate_pred"], task)
    problems = [f"{key} {record.get(key)!r} does not match the paired file ({value!r})"
                for key, value in numbers.items()
                if value is not None and (number(record, key) is None or abs(number(record, key) - value) > TOLERANCE)]
    return numbers, problems


def _skipped_or_failed(policy: GatePolicy, names: list[tuple[str, float]], note: str) -> list[Criterion]:
    if policy.incomparable_release == "skip_with_note":
        return [not_applicable(name, limit, "<=", "pts", f"{note}; skipped: gate.incomparable_release is "
                               "skip_with_note") for name, limit in names]
    return [criterion(name, None, limit, "<=", "pts", note) for name, limit in names]


def release_criteria(policy: GatePolicy, release: ReleaseDuel | None, runtimes: tuple[str, ...], primary: str,
                     task: str, resamples: int | None = None, seed: int | None = None
                     ) -> tuple[list[Criterion], dict | None]:
    """Every runtime's release_regression_pts (and, for text, release_cer_increase_pts), and the record's
    summary of the duel (None without a release). `task` is the evaluation's task name."""
    text = task == TEXT_RECOGNITION
    resamples = policy.bootstrap_resamples if resamples is None else resamples
    seed = policy.bootstrap_seed if seed is None else seed
    criteria: list[Criterion] = []
    record = {} if release is None else dict(release.metrics)
    summary = None if release is None else {
        "version": release.version, duel.STATUS: record.get(duel.STATUS), duel.PAIRED_SAMPLES:
        record.get(duel.PAIRED_SAMPLES), duel.PAIRED_FINGERPRINT: record.get(duel.PAIRED_FINGERPRINT),
        duel.DROPPED_OVERLAP: record.get(duel.DROPPED_OVERLAP), duel.TEST_SAMPLES: record.get(duel.TEST_SAMPLES),
        duel.RELEASE_SCORING_S: record.get(duel.RELEASE_SCORING_S), "runtimes": {}}
    for runtime in runtimes:
        names = [(criterion_name(runtime, primary, RELEASE_REGRESSION), policy.max_release_regression)]
        if text:
            names.append((criterion_name(runtime, primary, RELEASE_CER_INCREASE), policy.max_release_cer_increase_pts))
        if release is None:
            criteria += [not_applicable(name, limit, "<=", "pts", NO_RELEASE) for name, limit in names]
            continue
        if release.problem:
            why = f"release {release.version} cannot be compared with: {release.problem}"
            criteria += [criterion(name, None, limit, "<=", "pts", why) for name, limit in names]
            continue
        if record.get(duel.STATUS) != duel.PAIRED:
            why = f"release {release.version} cannot be scored on this version's test samples: " \
                  f"{record.get(duel.PROBLEM) or 'the duel recorded no scores'}"
            criteria += _skipped_or_failed(policy, names, why)
            continue
        found, summary_entry = _judged_runtime(policy, release, record, runtime, names, task, resamples, seed)
        criteria += found
        summary["runtimes"][runtime] = summary_entry
    if summary is not None:
        summary["statement"] = (_statement(record) if record.get(duel.STATUS) == duel.PAIRED else
                                f"not paired: {release.problem or record.get(duel.PROBLEM)}")
    return criteria, summary


def _judged_runtime(policy: GatePolicy, release: ReleaseDuel, record: dict, runtime: str,
                    names: list[tuple[str, float]], task: str, resamples: int, seed: int
                    ) -> tuple[list[Criterion], dict]:
    entry = (record.get(duel.RUNTIMES) or {}).get(runtime)
    arrays = _read(release.paired.get(runtime)) if entry else None
    if arrays is None:
        why = f"the duel with release {release.version} has no readable {runtime} scores"
        return [criterion(name, None, limit, "<=", "pts", why) for name, limit in names], {}
    numbers, problems = _checked(entry, arrays, task)
    paired = len(arrays["references"])
    statement = _statement(record)
    if problems:
        why = f"the duel's {runtime} record is not its paired file: " + "; ".join(problems)
        return [criterion(name, None, limit, "<=", "pts", why) for name, limit in names], numbers
    if paired < policy.min_paired_samples:
        why = f"{statement}: fewer than gate.min_paired_samples={policy.min_paired_samples}, too few to compare"
        return [criterion(name, None, limit, "<=", "pts", why) for name, limit in names], numbers
    interval = paired_bootstrap_delta(arrays["references"], arrays["candidate_pred"], arrays["release_pred"],
                                      resamples, seed, task)
    (name, limit), found = names[0], []
    regression = numbers[duel.REGRESSION]
    ci_note = f"95 % CI [{interval.low_pts:+.2f}, {interval.high_pts:+.2f}] pts (paired bootstrap)"
    passed = regression <= limit and (not policy.require_ci_within_drop or interval.high_pts <= limit)
    if regression <= limit and not passed:
        ci_note += f", whose upper bound exceeds {limit:g} (gate.require_ci_within_drop)"
    note = (f"{statement} vs release {release.version}: INT8 {numbers[duel.RELEASE_INT8_TOP1]:.2f} % release, "
            f"{numbers[duel.CANDIDATE_INT8_TOP1]:.2f} % this version; {ci_note}; release predictions from "
            f"{entry.get(duel.RELEASE_PREDICTIONS)}")
    found.append(Criterion(name, regression, limit, "<=", "pts", passed, note=note))
    if task == TEXT_RECOGNITION:
        cer_name, cer_limit = names[1]
        increase = numbers[duel.CER_INCREASE]
        found.append(criterion(cer_name, increase, cer_limit, "<=", "pts",
                               f"{statement}: CER {numbers[duel.RELEASE_INT8_CER]:.3g} % release, "
                               f"{numbers[duel.CANDIDATE_INT8_CER]:.3g} % this version"))
    summary = {**numbers, "interval": asdict(interval), duel.RELEASE_PREDICTIONS: entry.get(duel.RELEASE_PREDICTIONS),
               duel.SCORED_SAMPLES: entry.get(duel.SCORED_SAMPLES), duel.SECONDS: entry.get(duel.SECONDS)}
    return found, {key: value for key, value in summary.items() if not (isinstance(value, float)
                                                                       and not math.isfinite(value))}
