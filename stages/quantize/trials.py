"""The search's trials: one candidate calibrated, lowered and judged on the validation split, within a budget.

A candidate INT8 model is judged in one place, `TrialRunner.judge`, whoever produced it (`runtime_checks.Candidate`),
in every runtime the gate judges (`runtime_checks`): it passes only where it passes in each, against that runtime's
own FP32. The producer is chosen once, from the export's program format (`Producer`): PaddleSlim's calibration of
a legacy program (`paddleslim_producer`), or quantgate's calibration of a PIR export's FP32 ONNX graph
(`onnx_candidates`: PaddleSlim reads no PIR program).

One trial = a calibration with one recipe and skip list -> the lowering -> accuracy on the validation split and
latency against FP32, judged by the gate's own criteria (`validation_check`). Calibrations are keyed by a digest
of everything that decides them (`candidate_cache`), so a trial that repeats one (in this search, or from the cache
of an earlier run) costs no calibration; what a calibration measures on the FP32 activations is reused by a trial
that differs in thresholds or skip list only.

Trials calibrate on at most `quantize.search.trial_calibration_samples` rows (`trial_settings`); the
final calibration of the kept recipe (`final_trial`) uses quantize's own setting. The row count is
set by max_calibration_samples, which both digests hold, so neither calibration nor statistics are
ever taken for the other's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig, QuantizeRecipe
from quantgate.errors import StageError
from quantgate.int8.lower_int8 import Lowering
from quantgate.progress import live
from quantgate.runtimes.latency import measure_batch_sizes
from quantgate.runtimes.memory_fit import RUNNER_CEILING, runners_batch
from quantgate.samples.reading import open_data
from quantgate.stages.evaluate.outputs import ONNXRUNTIME
from quantgate.stages.quantize import evidence
from quantgate.stages.quantize.candidate_cache import Cache, content_digest
from quantgate.stages.quantize.memory_fit import calibration_choice, fitted
from quantgate.stages.quantize.onnx_candidates import OnnxGraphProducer
from quantgate.stages.quantize.paddleslim_producer import PADDLESLIM, PaddleSlimProducer
from quantgate.stages.quantize.pir_seam import is_pir_export
from quantgate.stages.quantize.ptq import calibration_batches, calibration_rows
from quantgate.stages.quantize.runtime_checks import (
    Candidate,
    RuntimeChecks,
    judged_runtimes,
    runner_forms,
    runtime_line,
)
from quantgate.stages.quantize.validation_check import ValidationCheck

VALIDATION_LOOP = "search validation"

log = logging.getLogger(__name__)

# What a candidate that cannot be built raises: PaddleSlim's and paddle2onnx's own errors come as RuntimeError,
# ValueError, AssertionError, KeyError or IndexError; quantgate's as StageError (QuantizationError,
# ConversionError). A full store, changed data or a bad config are not among them: those end the run.
CANDIDATE_FAILURES = (StageError, RuntimeError, TypeError, ValueError, AssertionError, KeyError, IndexError)


class Producer(Protocol):
    """Who makes the search's candidates, chosen once from the export's program format (`TrialRunner`): PaddleSlim
    for a legacy program (`paddleslim_producer`), quantgate's calibration on the FP32 ONNX graph for a PIR one
    (`onnx_candidates`). The phases and `TrialRunner.judge` never ask which."""

    name: str  # `Candidate.producer`
    fp32_onnx: Path  # the FP32 model candidates are judged against in onnxruntime and OpenVINO
    fp32_program: Path | None  # the FP32 program Paddle Inference runs; None: its candidates have none either
    written_files: tuple[str, str]  # (model, params): what the stage writes from the kept trial's folder

    def candidate(self, index: int, settings: QuantizeConfig, float_layers: tuple[str, ...]) -> Candidate:
        """`settings` (skip_tensors holding `float_layers`) calibrated and lowered, for trial `index`."""

    def layers(self, base: Trial) -> list[str]:
        """The layers quantized in `base` (weight names, graph order): what may fall back to FP32."""

    def lowered_without(self, settings: QuantizeConfig, layers: tuple[str, ...], out_onnx: Path) -> None:
        """A real calibration of `settings` with `layers` in FP32, lowered into `out_onnx`."""

    def estimator(self, base: Trial, base_settings: QuantizeConfig, twin_settings: QuantizeConfig | None,
                  layers: Iterable[str], skipped: tuple[str, ...], check: ValidationCheck, number: int):
        """What fall-backs of `base` score without a full trial (`layer_sensitivity.FallbackEstimator`'s shape:
        `float_weights` naming the layers it can estimate, `score(layers)`, `group_grids(layer)`)."""


@dataclass
class Trial:
    index: int
    phase: str  # "recipe", "fall-back", "restore", or "final" (the kept recipe on the full calibration set)
    recipe: dict
    float_layers: list[str]
    validation: dict
    passed: bool
    failures: list[str]
    latency_ms_p50_fp32: float
    latency_ms_p50_int8: float
    speedup_int8_vs_fp32: float
    seconds: float
    calibration_cached: bool
    calibration_digest: str
    calibration_samples: int  # the calibration rows its model was calibrated on
    calibration_s: float  # of `seconds`, the calibration's (near 0 from the cache)
    statistics_reused: bool  # its calibration started from an earlier one's statistics (at most one pass left)
    folder: Path = field(repr=False)  # the files the stage writes for it (`Producer.written_files`)
    paddle2onnx_file: Path = field(repr=False)  # its Q/DQ graph before the lowering (paddle2onnx's, or calibrated)
    latency_batch_size: int | None = None  # the images latency_ms_p50_* were timed on
    latency_ms_p50_fp32_batch1: float | None = None  # both timed at batch 1 too, in the same process
    latency_ms_p50_int8_batch1: float | None = None
    speedup_batch1: float | None = None
    producer: str = PADDLESLIM  # who produced its INT8 model (`Candidate.producer`)
    # Per validation sample: INT8 read it right (`ValidationCheck.score_samples`); what McNemar pairs between trials.
    outcomes: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Per FP32 layer, the grids its group reverted with it (fallback_groups); None outside the fall-back phases.
    float_groups: dict[str, list[str]] | None = None

    def record(self) -> dict:
        return {key: value for key, value in asdict(self).items()
                if key not in ("folder", "paddle2onnx_file", "outcomes")}


def closest(trials: list[Trial]) -> Trial:
    """The trial closest to FP32 (`evidence.closest`, which also returns the decisions that chose it).

    Every trial that a one-sided exact McNemar test (alpha 0.05) shows worse than the one reading the most
    validation samples right is out; of those left, the one whose outputs are closest to FP32's (per-frame KL for
    text, else `logit_error`), then `closest_to_fp32`, then the earlier. A drop moves in steps of one sample: on
    200 lines, 1 line apart is 0.5 pt, and no evidence that one calibration reads better than another. On
    PP-OCRv4's recognizer (docs/benchmarks.md, issue 45) 'hist' read 1 of 201 validation lines more than 'mse' and
    then lost 4.0 pts on 1,000 test lines, where 'mse' loses 0.5 (1,126 lines); 'mse' had the lower logit error
    (0.0375 against 0.0425).
    """
    return evidence.closest(trials)[0]


def kept_trial(trials: list[Trial]) -> Trial:
    """The fastest passing trial (speed-up INT8/FP32, then fewest FP32 layers); else the one closest to FP32
    (`evidence.kept`, which also returns the decisions that chose it)."""
    return evidence.kept(trials)[0]


def calibrated_samples(samples: int, config: QuantizeConfig) -> int:
    """How many of a `samples`-row calibration split `config` calibrates on (batch_nums null)."""
    return len(calibration_rows(samples, calibration_batches(samples, config) * config.batch_size))


def trial_settings(config: QuantizeConfig, samples: int) -> QuantizeConfig:
    """`config` as the search's trials calibrate: on at most `search.trial_calibration_samples` of `samples` rows.

    `config` itself when that is no fewer rows than it calibrates on anyway, when batch_nums is set
    (the user chose the batches), or when the split is empty (the first trial then says so).
    """
    wanted = config.search.trial_calibration_samples
    if wanted is None or config.batch_nums is not None or samples <= 0:
        return config
    fewer = config.model_copy(update={"max_calibration_samples": wanted})
    return fewer if calibrated_samples(samples, fewer) < calibrated_samples(samples, config) else config


class TrialRunner:
    """One search's trials: its budget, the trials run so far, and the calibrations they can reuse."""

    def __init__(self, config: QuantizeConfig, policy: GatePolicy, evaluate_config: EvaluateConfig,
                 model_dir: Path, data_dir: Path, scratch: Path, cache: Cache | None, num_workers: int = 0,
                 lowering: Lowering = Lowering()):
        # `config`: the settings the stage writes with (`full_config`); trials use `self.config`, on fewer rows.
        self.full_config, self.policy, self.budget = config, policy, config.search
        self.model_dir, self.scratch, self.cache = Path(model_dir), scratch, cache
        self.started = time.monotonic()
        self.trials: list[Trial] = []
        self.decisions: list[dict] = []  # how the search chose between trials (evidence.decision), for search.json
        self.failed_recipes: list[dict] = []  # recipes PaddleSlim (or the conversion) could not run
        # Calibration and validation images are streamed from the data stage's folder by every trial;
        # only the latency batch is held.
        self.data, self.num_workers = open_data(data_dir), num_workers
        if config.batch_size is None:  # as `search_quantization` fits it (the same choice: it is cached)
            config = self.full_config = fitted(config, calibration_choice(config, model_dir, self.data))
        self.config = trial_settings(config, self.data.size("calibration"))
        self.lowering = lowering
        # The producer is chosen here, once: PaddleSlim reads no PIR program, so a PIR export's candidates are
        # calibrated on its FP32 ONNX graph (`pir_seam`); nothing after this asks which it is.
        self.producer: Producer = (
            OnnxGraphProducer(self.model_dir, self.data, scratch, cache, lowering) if is_pir_export(self.model_dir)
            else PaddleSlimProducer(self.model_dir, self.data, scratch, cache, lowering, num_workers))
        self.fp32_onnx = self.producer.fp32_onnx
        judged, _ = judged_runtimes(policy, evaluate_config.runtimes, self.data.task.name)
        self.validation_batch = runners_batch(
            VALIDATION_LOOP, runner_forms(judged, self.fp32_onnx, self.producer.fp32_program),
            tuple(self.data.input_shape), evaluate_config.threads, requested=evaluate_config.batch_size,
            ceiling=RUNNER_CEILING, setting="evaluate.batch_size",
            subject=f"the FP32 and a trial's INT8 model in {', '.join(judged)} on inputs of {self.data.input_shape}")
        self.checks = RuntimeChecks(policy, evaluate_config.runtimes, self.fp32_onnx, self.producer.fp32_program,
                                    self.data, evaluate_config.threads, self.validation_batch.batch_size, num_workers)
        self.check = self.checks.check(ONNXRUNTIME)  # the fall-back estimates score in onnxruntime alone
        self.latency_batch = self.data.array("validation", limit=evaluate_config.latency_batch_size)[0]
        self.threads = evaluate_config.threads
        self.validation_digest = content_digest(self.data.split_digest("validation"))

    # -- budget ---------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def exhausted(self) -> str | None:
        """Why no further trial may start, or None."""
        if len(self.trials) >= self.budget.max_trials:
            return f"max_trials ({self.budget.max_trials}) reached"
        if self.elapsed_s() >= self.budget.timeout_s:
            return f"timeout ({self.budget.timeout_s:g} s) reached"
        return None

    # -- one trial ------------------------------------------------------------------------

    def run_trial(self, phase: str, recipe_settings: QuantizeConfig, float_layers: tuple[str, ...],
                  float_groups: dict[str, list[str]] | None = None) -> Trial:
        """One trial of the budget: `recipe_settings` with `float_layers` in FP32, calibrated, lowered and judged;
        `float_groups`: per FP32 layer, the grids the lowering reverts with it (recorded on the trial)."""
        trial = self._judged(len(self.trials) + 1, phase, recipe_settings.with_recipe(QuantizeRecipe(), float_layers),
                             float_layers)
        trial.float_groups = float_groups
        self.trials.append(trial)
        return trial

    def final_trial(self, kept: Trial) -> Trial | None:
        """`kept`'s recipe and FP32 layers calibrated on quantize's own rows and judged like a trial.

        None when the trials calibrated on those rows already. It is not one of `trials` and the
        budget does not stop it: the stage's output must be calibrated as the user configured it.
        """
        if self.config is self.full_config:
            return None
        settings = self.full_config.with_recipe(QuantizeRecipe(**kept.recipe), tuple(kept.float_layers))
        return self._judged(len(self.trials) + 1, "final", settings, tuple(kept.float_layers))

    def _judged(self, index: int, phase: str, settings: QuantizeConfig, float_layers: tuple[str, ...]) -> Trial:
        return self.judge(index, phase, self.producer.candidate(index, settings, float_layers))

    def judge(self, index: int, phase: str, candidate: Candidate) -> Trial:
        """`candidate` judged as trial `index` of `phase`, whoever produced it: accuracy in every judged runtime
        against its own FP32 (`runtime_checks`), latency against FP32, and the policy's verdict. Not added to
        `trials` (`run_trial` does that for the budget's trials)."""
        started = time.monotonic()
        size = len(self.latency_batch)
        timed = measure_batch_sizes({"fp32": self.fp32_onnx, "int8": candidate.int8_onnx}, self.latency_batch,
                                    tuple(dict.fromkeys((size, 1))), self.threads, self.budget.latency_repeats)
        latency, batch1 = timed[size], timed[1]
        validation, failures, outcomes = self.checks.judge(
            candidate, {"fp32": latency["fp32"]["p50"], "int8": latency["int8"]["p50"]}, self.latency_batch,
            self.budget.latency_repeats)
        trial = Trial(
            index=index, phase=phase, recipe=dict(candidate.recipe), float_layers=list(candidate.float_layers),
            validation=validation, passed=not failures, failures=failures,
            latency_ms_p50_fp32=latency["fp32"]["p50"], latency_ms_p50_int8=latency["int8"]["p50"],
            speedup_int8_vs_fp32=latency["fp32"]["p50"] / latency["int8"]["p50"],
            seconds=candidate.produced_s + time.monotonic() - started, calibration_cached=candidate.calibration_cached,
            calibration_digest=candidate.calibration_digest, calibration_samples=candidate.calibration_samples,
            calibration_s=candidate.calibration_s, statistics_reused=candidate.statistics_reused,
            folder=candidate.calibration_folder or (
                candidate.int8_onnx.parent if candidate.program is None else candidate.program),
            paddle2onnx_file=candidate.unlowered_onnx or candidate.int8_onnx, latency_batch_size=size,
            latency_ms_p50_fp32_batch1=batch1["fp32"]["p50"], latency_ms_p50_int8_batch1=batch1["int8"]["p50"],
            speedup_batch1=batch1["fp32"]["p50"] / batch1["int8"]["p50"], producer=candidate.producer,
            outcomes=outcomes,
        )
        live(log, "search %s (%s, %s, %d FP32 layers, %d samples): drop %.2f pts%s, agreement %.4f, %.2fx -> %s; %s",
             "final calibration" if phase == "final" else f"trial {index}", phase, trial.recipe["algo"],
             len(trial.float_layers), trial.calibration_samples, validation["accuracy_drop_pts"],
             runtime_line(validation), validation["agreement"], trial.speedup_int8_vs_fp32,
             "passes" if trial.passed else "misses", self.budget_line(trial.seconds, len(self.trials) + (phase != "final")))
        return trial

    def budget_line(self, seconds: float, trials_done: int) -> str:
        """What the trial just judged cost and what is left, e.g. "trial 84 s; 3 of 12 trials, 1,310 s of 1,800 s
        left" (`trials_done` counts it; the final calibration is no trial of the budget)."""
        left = max(self.budget.timeout_s - self.elapsed_s(), 0.0)
        return (f"trial {seconds:,.0f} s; {trials_done} of {self.budget.max_trials} trials, "
                f"{left:,.0f} s of {self.budget.timeout_s:,.0f} s left")
