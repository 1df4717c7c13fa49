"""The producer PaddleSlim is: the search's candidates for a legacy Paddle program, calibrated by PaddleSlim,
converted by paddle2onnx and lowered as the convert stage will (`TrialRunner` picks it for a legacy export).

What a calibration measures on the FP32 activations (`calibration.Statistics`) is keyed apart from the calibration,
by the model, the rows and the batch size only: a trial that differs in hist_percent, bias_correction,
weight_quantize_type or skip_tensors ('hist', 'KL', 'abs_max', 'avg') reuses it and runs no forward pass.
Fall-backs are estimated without a PaddleSlim run (`layer_sensitivity.FallbackEstimator`): one extra run with
every layer skipped supplies the float weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.metadata import version as installed_version
from pathlib import Path

from quantgate.config import QuantizeConfig, QuantizeRecipe
from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.paddle_quantization import quantized_layers
from quantgate.samples.reading import StoredData
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.quantize.calibration import STATISTIC_ALGOS, Statistics
from quantgate.stages.quantize.candidate_cache import (
    CALIBRATION_METRICS,
    Cache,
    CalibrationFolders,
    content_digest,
    files_digest,
)
from quantgate.stages.quantize.layer_sensitivity import FallbackEstimator, float_weights, lowered_model
from quantgate.stages.quantize.ptq import quantize_with_data
from quantgate.stages.quantize.runtime_checks import Candidate
from quantgate.stages.quantize.trial_candidate import trial_candidate
from quantgate.stages.quantize.validation_check import ValidationCheck

PADDLESLIM = "paddleslim"  # the producer of the candidates PaddleSlim calibrated (`Candidate.producer`)
# What decides a PaddleSlim calibration besides the model and the images.
CALIBRATION_FIELDS = ("algo", "hist_percent", "bias_correction", "weight_quantize_type",
                      "batch_size", "batch_nums", "max_calibration_samples", "skip_tensors",
                      "equalize_depthwise_inputs", "calibration_histogram", "rounding", "adaround_samples",
                      "adaround_iterations")
# What decides the statistics calibrations measure, besides the model and the images (the rows and batches).
STATISTICS_FIELDS = ("batch_size", "batch_nums", "max_calibration_samples", "equalize_depthwise_inputs",
                     "calibration_histogram")
STATISTICS_FORMAT = "quantgate-calibration-statistics-2"  # the sampled tensors, bins and file layout


class PaddleSlimProducer:
    """PaddleSlim's calibrations of the export's legacy program, cached by digest, as the search's candidates."""

    name = PADDLESLIM
    written_files = (MODEL_FILE, PARAMS_FILE)  # what the stage writes from the kept trial's folder

    def __init__(self, model_dir: Path, data: StoredData, scratch: Path, cache: Cache | None, lowering: Lowering,
                 num_workers: int = 0):
        self.model_dir, self.data, self.scratch, self.cache = Path(model_dir), data, Path(scratch), cache
        self.lowering, self.num_workers = lowering, num_workers
        self.fp32_program: Path | None = self.model_dir  # what Paddle Inference's FP32 runs
        self.fp32_onnx = self.scratch / "fp32.onnx"
        to_onnx(self.model_dir / MODEL_FILE, self.model_dir / PARAMS_FILE, self.fp32_onnx)
        # The splits' digests stand for their pixels: rows, file hashes and transforms decide them.
        self.inputs_digest = content_digest(
            files_digest(self.model_dir / MODEL_FILE, self.model_dir / PARAMS_FILE),
            data.split_digest("calibration"),
            {library: installed_version(library) for library in ("paddlepaddle", "paddleslim", "paddle2onnx")},
        )
        self._folders = CalibrationFolders(self.scratch, cache)
        self._statistics: dict[str, Statistics] = {}  # what they measured, by statistics digest (+ "/histograms")
        self._float_weights: dict[Path, dict] = {}  # every layer's float weights, by the calibration they came from

    def calibrate(self, settings: QuantizeConfig, allow_float: bool = False) -> tuple[Path, str, bool]:
        """PaddleSlim's model for `settings`, its digest, and whether it ran before (this search or the cache).

        `allow_float`: a model with nothing quantized is an answer, not an error (every layer skipped).
        """
        digest = content_digest(self.inputs_digest, {name: getattr(settings, name) for name in CALIBRATION_FIELDS},
                                {"weight_bits": self.lowering.weight_bits, **(  # AdaRound fits through the lowering
                                    {"hardswish_grids": self.lowering.hardswish_grids}
                                    if settings.rounding == "adaptive" else {})})
        folder, cached = self._folders.folder(digest, lambda into: self._run_paddleslim(settings, into, allow_float))
        return folder, digest, cached

    def _run_paddleslim(self, settings: QuantizeConfig, folder: Path, allow_float: bool = False) -> None:
        key = content_digest(self.inputs_digest, STATISTICS_FORMAT,
                             {name: getattr(settings, name) for name in STATISTICS_FIELDS})
        statistics = self._stored_statistics(key, settings.algo)
        result = quantize_with_data(settings, self.model_dir, MODEL_FILE, PARAMS_FILE, self.data, folder,
                                    num_workers=self.num_workers, allow_float=allow_float, statistics=statistics,
                                    weight_bits=self.lowering.weight_bits, adaround_lowering=self.lowering)
        (folder / CALIBRATION_METRICS).write_text(json.dumps(result.metrics, sort_keys=True, indent=2) + "\n")
        if result.statistics is not None:
            self._keep_statistics(key, result.statistics)

    def _stored_statistics(self, key: str, algo: str) -> Statistics | None:
        """The fullest statistics kept for `key` that `algo` can use: with 'mse''s losses (for it), with
        histograms, else the first pass only."""
        if algo not in STATISTIC_ALGOS:
            return None
        for digest in ((f"{key}/mse",) if algo == "mse" else ()) + (f"{key}/histograms", key):
            if (digest not in self._statistics and self.cache is not None
                    and (entry := self.cache.get(content_digest(digest))) is not None):
                self._statistics[digest] = Statistics.load(entry)
            if digest in self._statistics:
                return self._statistics[digest]
        return None

    def _keep_statistics(self, key: str, statistics: Statistics) -> None:
        """Keep `statistics` for this search, and in the cache: under the digest of the fullest pass that ran."""
        with_histograms = statistics.histograms is not None or statistics.fine_histograms is not None
        digest = f"{key}/mse" if statistics.mse_losses is not None else f"{key}/histograms" if with_histograms else key
        self._statistics[digest] = statistics
        if self.cache is not None and self.cache.get(content_digest(digest)) is None:
            with self.cache.fill(content_digest(digest)) as staging:
                statistics.save(staging, with_histograms=statistics.histograms is not None)

    def candidate(self, index: int, settings: QuantizeConfig, float_layers: tuple[str, ...]) -> Candidate:
        """`settings` calibrated (or taken from the cache), converted and lowered, for trial `index`."""
        def lower(calibration: Path, int8_onnx: Path) -> dict:
            return {"program": calibration, "unlowered_onnx": lowered_model(calibration, int8_onnx, self.lowering)}
        return trial_candidate(PADDLESLIM, self.scratch, index, settings, float_layers, self.calibrate, lower)

    # -- fall-backs -----------------------------------------------------------------------

    def layers(self, base) -> list[str]:
        """The layers PaddleSlim quantized in the `base` trial (weight names, graph order)."""
        return quantized_layers(base.paddle2onnx_file, base.folder / Path(MODEL_FILE).stem)

    def lowered_without(self, settings: QuantizeConfig, layers: tuple[str, ...], out_onnx: Path) -> None:
        """PaddleSlim's model for `settings` with `layers` left in FP32 (cached like any calibration), lowered into
        `out_onnx`: a real run, for a fall-back the estimate cannot assemble."""
        lowered_model(self.calibrate(settings.with_recipe(QuantizeRecipe(), layers))[0], out_onnx, self.lowering)

    def estimator(self, base, base_settings: QuantizeConfig, twin_settings: QuantizeConfig | None,
                  layers: Iterable[str], skipped: tuple[str, ...], check: ValidationCheck,
                  number: int) -> FallbackEstimator:
        """What FP32 fall-backs of the `base` trial would score, from one extra PaddleSlim run (cached).

        `skipped`: layers whose fall-back cannot be assembled; the estimate then starts from a real PaddleSlim
        calibration with them skipped (`twin_settings`' when the base is AdaRound's: its nearest-rounding twin).
        `number`: this estimator's number in the search (names its scratch file).
        """
        layers = list(layers)
        float_model = self._float_model(base_settings, tuple(layers))
        if float_model not in self._float_weights:
            self._float_weights[float_model] = float_weights(float_model)
        calibration, raw = base.folder, base.paddle2onnx_file
        if skipped or twin_settings is not None:
            calibration = self.calibrate((twin_settings or base_settings).with_recipe(QuantizeRecipe(), skipped))[0]
            raw = self.scratch / f"estimate-base-{number}.onnx"
            to_onnx(calibration / MODEL_FILE, calibration / PARAMS_FILE, raw)
        return FallbackEstimator(raw, calibration, self._float_weights[float_model], check,
                                 [layer for layer in layers if layer not in skipped], self.lowering)

    def _float_model(self, base_settings: QuantizeConfig, layers: tuple[str, ...]) -> Path:
        """PaddleSlim's model with every one of `layers` skipped: only its float weights are read, and no recipe
        changes those, so it calibrates with 'abs_max', which needs the statistics' first pass only (with the base
        recipe, PaddleSlim's own 'mse' once spent 22 min here on PP-OCRv4's recognizer for scales nobody reads)."""
        cheapest = QuantizeRecipe(algo="abs_max", bias_correction=False, rounding="nearest")  # nothing to fit
        return self.calibrate(base_settings.with_recipe(cheapest, layers), allow_float=True)[0]
