"""A candidate INT8 model judged in every runtime the gate judges, on the validation split.

The gate judges each runtime in evaluate.runtimes by the same criteria, against that runtime's thresholds, and
compares INT8 with FP32 in the same runtime. A search that judged in onnxruntime alone passed a trial there (drop
0.50 pts, agreement 0.9701) whose QDQ model OpenVINO lowers its own way: on the test lines OpenVINO's INT8 lost
2.16 pts and the gate failed. So every candidate is scored here in each judged runtime against that runtime's own
FP32 outputs (one `ValidationCheck` per runtime, its FP32 pass run once), and passes only where it passes in all.

Which runtimes: onnxruntime always (its numbers are the trial's top-level ones, which the search ranks and records
by; the gate's note on an unnamed threshold says so), then every other runtime evaluate.runtimes lists, unless the
policy leaves every validation threshold of it open (nothing it measures could fail it; the record says it was
skipped and why). onnxruntime and OpenVINO run the candidate's lowered ONNX model; Paddle Inference runs its
PaddleSlim program, and is "not applicable" to a candidate that has none (a calibration on the ONNX graph).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.config import GatePolicy
from quantgate.runtimes.forms import ModelForm
from quantgate.runtimes.latency import measure_batch_sizes
from quantgate.samples.reading import StoredData
from quantgate.stages.evaluate.outputs import ONNXRUNTIME, PADDLE_INFERENCE
from quantgate.stages.quantize.validation_check import ValidationCheck, policy_failures
from quantgate.tasks import TEXT_DETECTION, TEXT_RECOGNITION

# The policy's validation thresholds and the value at which each lets everything through (validation_check's
# VALIDATION_CRITERIA; max_e2e_line_drop_pts belongs to the OCR system, which the search does not judge).
OPEN_THRESHOLDS = {"max_accuracy_drop": 100.0, "max_cer_increase_pts": 100.0, "max_hmean_drop_pts": 100.0,
                   "min_agreement": 0.0, "min_int8_accuracy": 0.0, "min_speedup": 0.0}
# The thresholds that do not judge a task (as the gate's criteria: cer for text only, hmean in the drop's place).
UNUSED_BY_TASK = {TEXT_RECOGNITION: ("max_hmean_drop_pts",), TEXT_DETECTION: ("max_accuracy_drop",
                                                                              "max_cer_increase_pts")}
UNUSED_OTHERWISE = ("max_cer_increase_pts", "max_hmean_drop_pts")
RUNTIMES_KEY = "runtimes"  # in a trial's validation: {runtime: its numbers and verdict, or why it was not judged}
OUTCOMES_RUNTIME = "outcomes_runtime"  # in a trial's validation: the runtime whose per-sample outcomes it keeps
NOT_JUDGED = "not_judged"  # in a runtime's entry: why that runtime did not judge this candidate


@dataclass(frozen=True)
class Candidate:
    """One INT8 model for the search to judge, whoever produced it: what the runtimes run and what the record says.

    A producer (PaddleSlim's calibration and the lowering, `paddleslim_producer`; quantgate's calibration on a PIR
    model's ONNX graph, `onnx_candidates`; later a refit) builds one and hands it to `TrialRunner.judge`; the judging never asks who made it.
    """

    int8_onnx: Path  # the lowered QDQ model: what onnxruntime and OpenVINO run
    program: Path | None  # the PaddleSlim program folder Paddle Inference runs; None: the producer made none
    recipe: dict  # the recipe record (QuantizeRecipe's fields) that produced it
    float_layers: tuple[str, ...]  # layers left in FP32
    calibration_samples: int
    calibration_digest: str
    calibration_s: float  # what calibrating it cost (near 0 from the cache)
    produced_s: float  # what producing it cost in all (the calibration, the conversion, the lowering)
    producer: str  # who produced it: "paddleslim", "onnx-graph"
    calibration_cached: bool = False
    statistics_reused: bool = False
    unlowered_onnx: Path | None = None  # the conversion before the lowering (paddle2onnx's), where there was one
    # Where the producer keeps the files the stage writes for it, when that is not `program` (a calibration on the
    # ONNX graph: its raw Q/DQ graph, program scales and calibration record).
    calibration_folder: Path | None = None


def _open(policy: GatePolicy, runtime: str, task: str) -> bool:
    """Whether every threshold that judges `task` lets anything `runtime` measures through."""
    unused = UNUSED_BY_TASK.get(task, UNUSED_OTHERWISE)
    return all((policy.threshold(name, runtime) >= value) if name.startswith("max_")
               else (policy.threshold(name, runtime) <= value)
               for name, value in OPEN_THRESHOLDS.items() if name not in unused)


def judged_runtimes(policy: GatePolicy, listed: tuple[str, ...], task: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the runtimes a candidate of `task` is judged in, onnxruntime first; {listed runtime skipped: why})."""
    judged, skipped = [ONNXRUNTIME], {}
    for runtime in listed:
        if runtime == ONNXRUNTIME:
            continue
        if _open(policy, runtime, task):
            skipped[runtime] = (f"every validation threshold of the gate is open for {runtime} (no drop, agreement, "
                                "accuracy or speed-up it measures could fail it): not judged")
        else:
            judged.append(runtime)
    return tuple(judged), skipped


def fp32_form(runtime: str, fp32_onnx: Path, fp32_program: Path | None) -> ModelForm:
    """The FP32 model `runtime` compares a candidate with: export's program for Paddle Inference, else the ONNX file."""
    if runtime == PADDLE_INFERENCE:
        return ModelForm(Path(fp32_program), False, "export's FP32 program (oneDNN FP32)", "export")
    return ModelForm(Path(fp32_onnx), False, Path(fp32_onnx).name, "quantize")


def runner_forms(runtimes: tuple[str, ...], fp32_onnx: Path,
                 fp32_program: Path | None) -> dict[tuple[str, str], ModelForm]:
    """Every runner judging in `runtimes` opens, for the memory estimate (as if all were open at once; they run one
    runtime after another): a candidate is the FP32 network's twin, so each runtime's FP32 form stands for both.
    Without an FP32 program (a PIR export) Paddle Inference judges no candidate, and opens nothing."""
    return {(runtime, kind): fp32_form(runtime, fp32_onnx, fp32_program) for runtime in runtimes
            if fp32_program is not None or runtime != PADDLE_INFERENCE for kind in ("fp32", "int8")}


def _binding(entries: Mapping[str, dict]) -> str:
    """The judged runtime whose per-sample outcomes a trial keeps: the one that lost the most accuracy against its
    own FP32 (the binding one for the accuracy criterion); onnxruntime on a tie."""
    scored = [runtime for runtime, entry in entries.items() if NOT_JUDGED not in entry]
    return max(scored, key=lambda runtime: (entries[runtime]["accuracy_drop_pts"], runtime == ONNXRUNTIME))


class RuntimeChecks:
    """The validation checks of every judged runtime (each with its FP32 outputs, computed once on first use) and
    the FP32 models they compare with; `judge` scores one candidate in all of them."""

    def __init__(self, policy: GatePolicy, listed: tuple[str, ...], fp32_onnx: Path, fp32_program: Path | None,
                 data: StoredData, threads: int, batch_size: int, num_workers: int = 0):
        # fp32_program None: a PIR export, whose candidates have no program either (Paddle Inference not applicable)
        self.policy, self.fp32_onnx = policy, Path(fp32_onnx)
        self.fp32_program = None if fp32_program is None else Path(fp32_program)
        self.runtimes, self.skipped = judged_runtimes(policy, listed, data.task.name)
        self.data, self.threads, self.batch_size, self.num_workers = data, threads, batch_size, num_workers
        self._checks: dict[str, ValidationCheck] = {}

    def fp32_form(self, runtime: str) -> ModelForm:
        return fp32_form(runtime, self.fp32_onnx, self.fp32_program)

    def int8_form(self, runtime: str, candidate: Candidate) -> ModelForm | None:
        """What `runtime` runs of `candidate`; None where it has nothing to run (Paddle Inference, no program)."""
        if runtime == PADDLE_INFERENCE:
            return None if candidate.program is None else ModelForm(
                Path(candidate.program), True, "the candidate's PaddleSlim program (oneDNN INT8)", "quantize")
        return ModelForm(Path(candidate.int8_onnx), True, Path(candidate.int8_onnx).name, "quantize")

    def check(self, runtime: str) -> ValidationCheck:
        """`runtime`'s check; its FP32 pass runs the first time it is asked for."""
        if runtime not in self._checks:
            self._checks[runtime] = ValidationCheck(self.fp32_form(runtime), self.data, self.threads, self.batch_size,
                                                    self.num_workers, runtime=runtime)
        return self._checks[runtime]

    def judge(self, candidate: Candidate, onnxruntime_latency: Mapping[str, float], latency_batch: np.ndarray,
              repeats: int) -> tuple[dict, list[str], np.ndarray]:
        """(validation, failures, per-sample outcomes) of `candidate` in every judged runtime.

        validation: onnxruntime's numbers at the top level (what the search ranks by and search.json readers read),
        their latency beside (`onnxruntime_latency`: its "fp32" and "int8" medians, timed by the caller), and under
        RUNTIMES_KEY every listed runtime's numbers with its own latency at the latency batch, "passed" and
        "failures", or NOT_JUDGED and why. failures: each names its runtime. outcomes: the binding runtime's
        (`_binding`, named under OUTCOMES_RUNTIME).

        Raises:
            RuntimeCannotRun: a judged runtime cannot run the candidate (or FP32); StageError: a latency process failed.
        """
        entries: dict[str, dict] = {}
        outcomes: dict[str, np.ndarray] = {}
        failures: list[str] = []
        for runtime in self.runtimes:
            form = self.int8_form(runtime, candidate)
            if form is None:
                entries[runtime] = {NOT_JUDGED: f"not applicable: the candidate ({candidate.producer}) has no Paddle "
                                                "program for Paddle Inference to run"}
                continue
            scores, outcomes[runtime] = self.check(runtime).score_samples(form)
            latency = dict(onnxruntime_latency) if runtime == ONNXRUNTIME else \
                self._latency(runtime, form, latency_batch, repeats)
            timed = {"latency_ms_p50_fp32": latency["fp32"], "latency_ms_p50_int8": latency["int8"],
                     "speedup_int8_vs_fp32": latency["fp32"] / latency["int8"]}
            missed = policy_failures(self.policy, {**scores, **timed}, runtime)
            entries[runtime] = {**scores, **timed, "passed": not missed, "failures": missed}
            failures.extend(missed)
        entries.update({runtime: {NOT_JUDGED: why} for runtime, why in self.skipped.items()})
        binding = _binding(entries)
        top = {key: value for key, value in entries[ONNXRUNTIME].items() if key not in ("passed", "failures")}
        for timed_key in ("latency_ms_p50_fp32", "latency_ms_p50_int8", "speedup_int8_vs_fp32"):
            top.pop(timed_key)  # the trial's own fields hold onnxruntime's latency
        return {**top, RUNTIMES_KEY: entries, OUTCOMES_RUNTIME: binding}, failures, outcomes[binding]

    def _latency(self, runtime: str, form: ModelForm, batch: np.ndarray, repeats: int) -> dict[str, float]:
        """FP32's and `form`'s median ms in `runtime` at the latency batch, in a process of its own (as the gate's
        speed-up is judged per runtime, by that runtime's own ratio)."""
        timed = measure_batch_sizes({"fp32": self.fp32_form(runtime).path, "int8": form.path}, batch, (len(batch),),
                                    self.threads, repeats, runtime, int8=("int8",))[len(batch)]
        return {"fp32": timed["fp32"]["p50"], "int8": timed["int8"]["p50"]}


def runtime_line(validation: dict) -> str:
    """The other judged runtimes' drops for the trial's log line, e.g. " (openvino 2.16 pts)"; "" when none."""
    entries = validation.get(RUNTIMES_KEY) or {}
    shown = [f"{runtime} {entry['accuracy_drop_pts']:.2f} pts" for runtime, entry in entries.items()
             if runtime != ONNXRUNTIME and NOT_JUDGED not in entry]
    return f" ({', '.join(shown)})" if shown else ""

