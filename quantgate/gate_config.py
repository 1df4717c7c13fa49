"""The `gate` section of the configuration: the release policy, with thresholds that are one number for every
runtime or a map by runtime. Re-exported by `quantgate.config`, the one schema."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import Discriminator, Field, Tag

from quantgate.config_base import Section

# A per-runtime gate threshold: one number for every runtime, or {runtime: number}; PipelineConfig checks that
# a map names every runtime evaluate.runtimes lists. The shape picks the form, so a bad value is reported once,
# against the form it was written in (gate.min_speedup.number, gate.min_speedup.by_runtime.openvino).
RuntimeName = Literal["onnxruntime", "openvino", "paddle_inference"]  # stages/evaluate/outputs.py RUNTIME_NAMES
Bounded = TypeVar("Bounded")


def _number_or_map(value: Any) -> str:
    return "by_runtime" if isinstance(value, dict) else "number"


PerRuntime = Annotated[
    Annotated[Bounded, Tag("number")] | Annotated[dict[RuntimeName, Bounded], Field(min_length=1), Tag("by_runtime")],
    Discriminator(_number_or_map),
]
Points = Annotated[float, Field(ge=0, le=100)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Ratio = Annotated[float, Field(ge=0)]
BY_RUNTIME = "; one number for every runtime, or a map {runtime: number} naming each runtime evaluate.runtimes lists"


class GatePolicy(Section):
    # The thresholds of the criteria judged once per runtime (quantgate/policy/runtimes.py PER_RUNTIME).
    PER_RUNTIME: ClassVar[tuple[str, ...]] = (
        "max_accuracy_drop", "max_cer_increase_pts", "max_hmean_drop_pts", "max_e2e_line_drop_pts", "min_agreement",
        "min_int8_accuracy", "min_speedup")

    max_accuracy_drop: PerRuntime[Points] = Field(
        1.0, description=f"Largest allowed top-1 drop of INT8 vs FP32, in percentage points{BY_RUNTIME}."
    )
    min_agreement: PerRuntime[Fraction] = Field(
        0.98, description="Smallest allowed share of test samples where INT8 and FP32 predict the same class"
        f"{BY_RUNTIME}."
    )
    min_int8_accuracy: PerRuntime[Points] = Field(
        0.0, description=f"Smallest allowed INT8 top-1 accuracy, in percent (0 disables the floor){BY_RUNTIME}."
    )
    # One number: every runtime compares its INT8 top-1 with the release's on the same samples (docs/gate.md).
    max_release_regression: float = Field(
        1.0, ge=0, le=100,
        description="Largest allowed INT8 top-1 drop vs the current release version's INT8 top-1, both "
        "measured on the same test samples in each runtime, in points (not applicable while there is no release).",
    )
    max_release_cer_increase_pts: float = Field(
        0.5, ge=0, le=100,
        description="text_recognition: largest allowed rise of this version's INT8 character error rate over the "
        "release's, in points, both measured on the same test samples (classification: not applicable).",
    )
    min_paired_samples: int = Field(
        100, ge=2, description="Fewest test samples, seen by neither this version nor the release in training, "
        "calibration or validation, that the comparison with the release must be paired on (fewer: it fails).",
    )
    incomparable_release: Literal["fail", "skip_with_note"] = Field(
        "fail", description="When the release cannot be scored on this version's test samples (the class set "
        "changed; its model is missing, fails verification or its runtime is not installed): fail the "
        "comparison, or skip it with a note.",
    )
    require_ci_within_drop: bool = Field(
        False, description="Also require the lower bound of the 95 % bootstrap interval of the INT8-FP32 "
        "accuracy delta to stay above -max_accuracy_drop, and the upper bound of the paired interval of the "
        "regression vs the release to stay within max_release_regression.",
    )
    bootstrap_resamples: int = Field(
        2000, ge=100, le=100_000, description="Paired bootstrap resamples of the test set for the delta's interval."
    )
    bootstrap_seed: int = Field(0, ge=0, description="Seed of the bootstrap resampling, so the interval is reproducible.")
    max_cer_increase_pts: PerRuntime[Points] = Field(
        0.5, description="text_recognition: largest allowed rise of INT8's character error rate over "
        f"FP32's, in percentage points (classification: not applicable){BY_RUNTIME}."
    )
    max_hmean_drop_pts: PerRuntime[Points] = Field(
        1.0, description="text_detection: largest allowed drop of INT8's hmean (boxes at IoU 0.5) below FP32's, in "
        f"percentage points; it replaces max_accuracy_drop there (other tasks: not applicable){BY_RUNTIME}."
    )
    max_e2e_line_drop_pts: PerRuntime[Points] = Field(
        1.0, description="ocr_system: largest allowed drop of the all-INT8 system's end-to-end line accuracy (a "
        "line found at IoU >= 0.5 and read exactly) below the all-FP32 system's, in points; with ocr_system, "
        f"max_cer_increase_pts judges the CER over matched lines and min_agreement the read lines{BY_RUNTIME}."
    )
    min_speedup: PerRuntime[Ratio] = Field(
        1.0, description="Smallest allowed INT8 speedup over FP32 (FP32 / INT8 median latency in that runtime); "
        f"1 fails an INT8 model slower than FP32, 0 disables the check{BY_RUNTIME} (e.g. {{onnxruntime: 1, "
        "paddle_inference: 0}: gate onnxruntime on speed, keep paddle_inference's for information)."
    )

    def threshold(self, name: str, runtime: str) -> float:
        """`name`'s threshold for `runtime`: the one number or the map's value; for a runtime the map does not
        name (the search's onnxruntime check when onnxruntime is not listed), the map's strictest value."""
        value = getattr(self, name)
        if not isinstance(value, dict):
            return value
        return value[runtime] if runtime in value else (max if name.startswith("min_") else min)(value.values())

    def unnamed_runtimes(self, runtimes: tuple[str, ...]) -> dict[str, list[str]]:
        """{threshold given as a map: the runtimes of `runtimes` it names no value for}."""
        maps = {name: getattr(self, name) for name in self.PER_RUNTIME if isinstance(getattr(self, name), dict)}
        return {name: missing for name, value in maps.items() if (missing := [r for r in runtimes if r not in value])}
