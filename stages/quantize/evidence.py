"""Which candidate INT8 model the search prefers, and on what evidence.

On a validation split of a few hundred samples one sample is a fraction of a point, so "drop 1.5 against 2.0
pts" tells nothing by itself. The search chooses as follows, and records every step (`decision`):

- **kept** (`kept`): of the trials that pass the policy, the fastest, by the speed-up INT8/FP32 each trial
  measured in its own process (the ratio cancels the machine's drift between trials); fewer FP32 layers only
  break a tie, then the earlier trial. If none passes, the closest to FP32.
- **closest to FP32** (`closest`): the trial that reads the most validation samples right is the reference (the
  earliest of equals). Every other trial is met with it by a one-sided exact McNemar test at `ALPHA` on the
  samples the two read differently (b: the first right and the second wrong; c: the reverse): a trial the
  reference beats with p below `ALPHA` (scipy.stats.binomtest on max(b, c) of b + c, alternative 'greater') is
  out. On 200 lines one line against none is p 0.50 and rules nothing out; 12 against 1 is p 0.002. Of the trials
  left, the one whose outputs are closest to FP32's wins: for text recognition the mean per-frame KL divergence of
  INT8's output distribution from FP32's (`output_kl`, from `validation_check`), for other tasks the relative
  logit error; then `closest_to_fp32`, then the earlier trial. They meet in the order given, the standing choice
  against each next one.

Comparing every trial with the one reference, not each with the last winner, keeps the choice consistent: a
trial the evidence shows worse than the best-reading one cannot come back by being close to FP32 in output.
Trials without per-sample outcomes (scripted tests, a record read back) are judged on the drop instead: more
than SAMPLES_TO_TELL samples behind the smallest drop is out; each decision says which evidence it used.

A trial judged in several runtimes (`runtime_checks`) keeps one runtime's per-sample outcomes: the binding one's,
the runtime that lost the most accuracy against its own FP32 (onnxruntime on a tie; named in its validation's
`outcomes_runtime`). McNemar then pairs what each trial reads right where it is weakest, which is where the gate
would fail it. The drop, the distance and the speed-up it reads stay onnxruntime's (the trial's top-level numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from scipy.stats import binomtest

ALPHA = 0.05  # McNemar's significance level, one-sided
SAMPLES_TO_TELL = 3  # without per-sample outcomes: validation samples a difference in drop must exceed to count
KL_DISTANCE, LOGIT_DISTANCE = "output_kl", "logit_error"  # validation keys: the outputs' distance to FP32's


class Candidate(Protocol):
    """What a decision reads of a trial (`trials.Trial`)."""

    index: int
    passed: bool
    float_layers: list[str]
    validation: dict
    speedup_int8_vs_fp32: float
    outcomes: np.ndarray | None  # per validation sample: read right in the binding runtime (see the module docstring)


def closest_to_fp32(trial: Candidate) -> tuple:
    """Sort key: accuracy lost (a gain counts as none), then CER gained (text), then disagreement, then logit error."""
    validation = trial.validation
    return (max(validation["accuracy_drop_pts"], 0.0), max(validation.get("cer_increase_pts", 0.0), 0.0),
            -validation["agreement"], validation[LOGIT_DISTANCE])


def mcnemar(first: np.ndarray, second: np.ndarray) -> tuple[int, int, float]:
    """(b, c, p): samples `first` reads right and `second` wrong, the reverse, and the one-sided exact McNemar
    p-value that the one with more of them is the better (1.0 when no sample is read differently)."""
    first, second = np.asarray(first, bool), np.asarray(second, bool)
    b, c = int(np.sum(first & ~second)), int(np.sum(second & ~first))
    p_value = binomtest(max(b, c), b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    return b, c, float(p_value)


def _distance_name(trials: Sequence[Candidate]) -> str:
    """KL of the output distributions where every trial has it (text recognition), else the logit error."""
    return KL_DISTANCE if all(KL_DISTANCE in trial.validation for trial in trials) else LOGIT_DISTANCE


def _paired(trials: Sequence[Candidate]) -> bool:
    """Whether every trial has per-sample outcomes on the same samples."""
    outcomes = [getattr(trial, "outcomes", None) for trial in trials]
    return all(each is not None for each in outcomes) and len({len(each) for each in outcomes}) == 1 \
        and len(outcomes[0]) > 0


def _drop(trial: Candidate) -> float:
    return max(trial.validation["accuracy_drop_pts"], 0.0)


def decision(first: Candidate, second: Candidate, winner: Candidate, rule: str, reason: str,
             distance_name: str) -> dict:
    """One meeting of two trials, JSON-serialisable: who met, who won, why, and the evidence either way
    (b, c and p_value are None without per-sample outcomes)."""
    b = c = p_value = None
    if _paired((first, second)):
        b, c, p_value = mcnemar(first.outcomes, second.outcomes)
    return {"trials": [first.index, second.index], "winner": winner.index, "rule": rule, "reason": reason,
            "b": b, "c": c, "p_value": p_value, "alpha": ALPHA, "distance_name": distance_name,
            "distance": [float(first.validation[distance_name]), float(second.validation[distance_name])],
            "accuracy_drop_pts": [first.validation["accuracy_drop_pts"], second.validation["accuracy_drop_pts"]],
            "speedup": [first.speedup_int8_vs_fp32, second.speedup_int8_vs_fp32]}


def _shown_worse(reference: Candidate, trial: Candidate, paired: bool) -> str | None:
    """Why `trial` is shown worse than `reference` (the best-reading trial), or None when it is not."""
    if paired:
        b, c, p_value = mcnemar(reference.outcomes, trial.outcomes)
        return f"McNemar p={p_value:.3g} ({b} vs {c} samples read differently)" if b > c and p_value < ALPHA \
            else None
    samples = max(int(reference.validation.get("validation_samples", 1)), 1)
    if _drop(trial) - _drop(reference) > 100.0 * SAMPLES_TO_TELL / samples + 1e-9:
        return (f"no per-sample outcomes: drop {_drop(reference):.2f} vs {_drop(trial):.2f} pts, more than "
                f"{SAMPLES_TO_TELL} of {samples} samples apart")
    return None


def closest(trials: Sequence[Candidate]) -> tuple[Candidate, list[dict]]:
    """The trial closest to FP32 (see the module docstring) and the decisions that chose it: each trial ruled
    out against the reference (rule 'mcnemar' or 'drop'), then each meeting of those left ('distance', 'tie').

    Raises:
        ValueError: no trials.
    """
    if not trials:
        raise ValueError("no trial to choose from: the search ran none (see its failed recipes)")
    paired, name = _paired(trials), _distance_name(trials)
    label = "KL" if name == KL_DISTANCE else "logit error"
    reference = max(trials, key=lambda trial: int(np.sum(trial.outcomes)) if paired else -_drop(trial))
    decisions, left = [], []
    for trial in trials:
        why = None if trial is reference else _shown_worse(reference, trial, paired)
        if why is None:
            left.append(trial)
        else:
            decisions.append(decision(reference, trial, reference, "mcnemar" if paired else "drop", why, name))
    chosen = left[0]
    for trial in left[1:]:
        if paired:
            b, c, p_value = mcnemar(chosen.outcomes, trial.outcomes)
            evidence = (f"inconclusive (p={p_value:.2f}, {b} vs {c} samples read differently)" if p_value >= ALPHA
                        else f"both within the evidence of trial {reference.index}, which reads the most samples")
        else:
            evidence = f"no per-sample outcomes; drops within {SAMPLES_TO_TELL} samples of the smallest"
        one, other = float(chosen.validation[name]), float(trial.validation[name])
        if one != other:
            winner = chosen if one < other else trial
            decisions.append(decision(chosen, trial, winner, "distance", f"{evidence}: closer outputs ({label} "
                                      f"{min(one, other):.4g} vs {max(one, other):.4g})", name))
        else:
            winner = trial if closest_to_fp32(trial) < closest_to_fp32(chosen) else chosen
            decisions.append(decision(chosen, trial, winner, "tie", f"{evidence}, equal {label}: closest_to_fp32, "
                                      "then the earlier trial", name))
        chosen = winner
    return chosen, decisions


def kept(trials: Sequence[Candidate]) -> tuple[Candidate, list[dict]]:
    """The trial the search keeps (the fastest passing one, else `closest`) and the decisions that chose it."""
    passing = [trial for trial in trials if trial.passed]
    if not passing:
        return closest(trials)
    name, chosen, decisions = _distance_name(passing), passing[0], []
    for trial in passing[1:]:
        speeds = (chosen.speedup_int8_vs_fp32, trial.speedup_int8_vs_fp32)
        if speeds[0] != speeds[1]:
            winner = chosen if speeds[0] > speeds[1] else trial
            decisions.append(decision(chosen, trial, winner, "faster", f"both pass; faster ({max(speeds):.3f}x "
                                      f"vs {min(speeds):.3f}x INT8/FP32)", name))
        else:
            winner = trial if len(trial.float_layers) < len(chosen.float_layers) else chosen
            decisions.append(decision(chosen, trial, winner, "fewer FP32 layers", f"both pass at the same "
                                      f"speed-up; {len(winner.float_layers)} FP32 layers", name))
        chosen = winner
    return chosen, decisions
