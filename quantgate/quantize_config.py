"""The quantize and convert sections of the configuration schema (re-exported by `quantgate.config`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from quantgate.config_base import Section

ALGOS = Literal["hist", "KL", "mse", "avg", "abs_max", "min_max"]
ROUNDINGS = Literal["nearest", "adaptive"]
WEIGHT_QUANTIZE_TYPES = Literal["channel_wise_abs_max", "abs_max"]


class QuantizeRecipe(Section):
    """One PaddleSlim setting for the search to try; a field left unset keeps quantize's own value."""

    algo: ALGOS | None = Field(None, description="Activation calibration algorithm.")
    hist_percent: float | None = Field(None, gt=0, le=1, description="Percentile kept by 'hist'.")
    bias_correction: bool | None = Field(None, description="PaddleSlim's bias correction of quantized weights.")
    weight_quantize_type: WEIGHT_QUANTIZE_TYPES | None = Field(None, description="Per-channel or per-tensor weights.")
    rounding: ROUNDINGS | None = Field(None, description="Nearest rounding of the weights, or AdaRound's.")


# Cheapest first. KL is not among them: on MobileNetV2 here its threshold search took 5 minutes (hist:
# seconds) and gave the lowest agreement of all recipes; list {algo: KL} in quantize.search.recipes to try it.
DEFAULT_RECIPES = (
    QuantizeRecipe(),  # quantize's own settings come first
    QuantizeRecipe(algo="hist", hist_percent=0.99999),
    QuantizeRecipe(algo="avg"),
    QuantizeRecipe(algo="mse"),
    QuantizeRecipe(bias_correction=True),
)


class SearchConfig(Section):
    recipes: tuple[QuantizeRecipe, ...] = Field(
        DEFAULT_RECIPES, min_length=1,
        description="PaddleSlim settings tried in order before any layer falls back to FP32; the first is the plain PTQ.",
    )
    max_trials: int = Field(12, ge=1, le=1000, description="Quantize-and-validate attempts at most (recipes, fall-backs, prunes).")
    timeout_s: float = Field(1800, gt=0, description="Wall-clock budget of the search; no trial starts after it.")
    recovery: bool = Field(
        False, description="When no recipe passes: the closest one again with AdaRound (quantize.rounding "
        "'adaptive', quantize.adaround_samples and adaround_iterations) before any layer falls back to FP32; one trial, "
        "counted against timeout_s and cached like the others. Off by default: on PP-OCRv4's recognizer it gained "
        "0.5 pt on one calibration split and lost 1.4 on another (docs/search.md).",
    )
    max_float_layers: int = Field(8, ge=0, description="Layers the search may leave in FP32 at most.")
    latency_repeats: int = Field(30, ge=3, le=10_000, description="Timed runs per trial's INT8 model (median kept).")
    trial_calibration_samples: int | None = Field(
        256, ge=1, description="Calibration samples each trial calibrates on at most (spread evenly); the kept "
        "recipe is then calibrated once more on quantize's own setting. null: every trial uses quantize's setting; "
        "ignored when quantize.batch_nums is set.",
    )


class QuantizeConfig(Section):
    strategy: Literal["single", "search"] = Field(
        "search", description="'single': one PaddleSlim run with these settings; 'search': try recipes and FP32 "
        "fall-backs until the gate policy holds on the validation split (quantize.search)."
    )
    algo: ALGOS = Field("hist", description="PaddleSlim activation calibration algorithm.")
    hist_percent: float = Field(0.9999, gt=0, le=1, description="Percentile kept by the 'hist' algorithm.")
    bias_correction: bool = Field(False, description="PaddleSlim's bias correction of the quantized weights.")
    batch_size: int | None = Field(
        None, ge=1, description="Calibration samples per batch; null: the largest batch (up to 32) that fits the "
        "memory budget (QUANTGATE_MEMORY_GB). 'hist', 'KL' and 'abs_max' give the same scales at any batch; 'avg' "
        "and 'mse' work per batch, and a lowered batch is recorded and enters the reuse digest.",
    )
    batch_nums: int | None = Field(
        None, ge=1, description="Calibration batches to run (set batch_size with it); null: as many as "
        "max_calibration_samples allows."
    )
    max_calibration_samples: int | None = Field(
        1024, ge=1, description="With batch_nums null: calibrate on at most this many samples, spread evenly over "
        "the calibration split; null: the whole split (its time and memory then grow with the data)."
    )
    weight_quantize_type: WEIGHT_QUANTIZE_TYPES = Field(
        "channel_wise_abs_max", description="Per-channel or per-tensor weight scales."
    )
    rounding: ROUNDINGS = Field(
        "nearest", description="'nearest': PaddleSlim's rounding of every weight to its grid; 'adaptive': AdaRound, "
        "each layer's weights rounded up or down (same grids) to bring its output on calibration data closer to "
        "FP32's (stages/quantize/adaround.py).",
    )
    adaround_samples: int = Field(64, ge=1, description="Calibration samples AdaRound fits each layer on.")
    adaround_iterations: int = Field(500, ge=1, description="Adam steps AdaRound takes per layer.")
    skip_tensors: tuple[str, ...] = Field(
        (), description="Weight names (e.g. 'conv2d_0.w_0') whose layers PaddleSlim leaves in float."
    )
    equalize_depthwise_inputs: bool = Field(
        True, description="Before calibrating, rescale each BatchNorm output that only a depthwise conv reads, "
        "channel by channel (the conv's filter takes the inverse), so one INT8 grid fits every channel; "
        "the model's function is unchanged.",
    )
    calibration_histogram: Literal["one_pass", "exact"] = Field(
        "one_pass", description="How 'hist' and 'KL' measure: 'one_pass' runs each calibration batch once and "
        "bins activations into fine fixed bins, read off as PaddleSlim's 2048 once the range is known (half the "
        "forward passes; thresholds within a fine bin, 0.2 %, of PaddleSlim's); 'exact': PaddleSlim's two passes, "
        "scale for scale.",
    )
    search: SearchConfig = Field(default_factory=SearchConfig, description="Budget and recipes of strategy 'search'.")

    @model_validator(mode="after")
    def _batches_counted_in_samples(self) -> "QuantizeConfig":
        # batch_nums counts batches: without a batch size it would count whatever the memory budget chose
        if self.batch_nums is not None and self.batch_size is None:
            raise ValueError(f"quantize.batch_nums={self.batch_nums} needs quantize.batch_size: set both, or leave "
                             "batch_nums null and bound the samples with max_calibration_samples")
        return self

    def with_recipe(self, recipe: QuantizeRecipe, float_layers: tuple[str, ...] = ()) -> "QuantizeConfig":
        """These settings with `recipe`'s fields applied and `float_layers` added to skip_tensors."""
        update = recipe.model_dump(exclude_none=True)
        update["skip_tensors"] = tuple(dict.fromkeys((*self.skip_tensors, *float_layers)))
        return self.model_copy(update=update)


class ConvertConfig(Section):
    hardswish_grids: bool = Field(
        False, description="Give the output of an affine after a HardSwish (PP-LCNetV3's blocks) an INT8 grid of its "
        "own with an exact zero point, so more of the backbone runs on integer kernels in onnxruntime (PP-OCRv4 rec: "
        "1.2x at batch 1, 1.3-1.4x at batch 16; line accuracy unchanged beyond chance on 1,000 lines); the search's "
        "trials are lowered the same way.",
    )
