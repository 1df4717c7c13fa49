"""Accuracy-aware INT8: search PaddleSlim's recipes, then FP32 fall-backs, until the gate policy holds
on the validation split, within a budget.

One trial = PaddleSlim calibration with one recipe and skip list -> paddle2onnx -> the lowering ->
accuracy on the validation split and latency against FP32, judged by the gate's own criteria
(`validation_check`). The order, as Intel Neural Compressor and NNCF's accuracy control do it:

1. recipes (`quantize.search.recipes`), in order; the first is plain PTQ with quantize's settings.
   A recipe that passes with every layer quantized ends the search: other recipes build the same
   graph, so none can be faster.
2. if none passes: the best recipe's layers ranked by sensitivity (`layer_sensitivity`: each
   layer's FP32 fall-back estimated without a PaddleSlim run), and the most sensitive ones left in
   FP32 (PaddleSlim's skip_tensor_list). The estimate picks the fewest leading layers that pass;
   a real PaddleSlim trial confirms it, one more layer per trial if it does not, until the policy
   holds or `max_float_layers` is reached;
3. once a fall-back set passes: each of its layers is tried back in INT8 (least sensitive
   first) and stays INT8 if the policy still holds; a set the estimate already fails costs no
   trial. These trials also measure what each FP32 layer costs in speed.

The kept trial is the passing one with the fewest FP32 layers, then the lowest measured latency.
If none passes, the trial closest to FP32 is kept and the search says so: the gate then fails
it (`search_validation`), whatever the test split says. PaddleSlim calibrations and rankings
are cached by content digest, so a rerun with the same inputs recomputes neither.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Protocol

import numpy as np

from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig, QuantizeRecipe
from quantgate.stages.convert.lower_int8 import quantized_layers
from quantgate.stages.convert.onnx_export import to_onnx
from quantgate.stages.data.splits import load_splits
from quantgate.stages.evaluate.latency import measure
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.quantize.layer_sensitivity import FallbackEstimator, float_weights, lowered_model, rank_layers
from quantgate.stages.quantize.outputs import SEARCH_FILE
from quantgate.stages.quantize.ptq import QuantizationError, QuantizeResult, quantize_with_images
from quantgate.stages.quantize.validation_check import ValidationCheck, policy_failures
from quantgate.stages.shared.errors import StageError

log = logging.getLogger(__name__)

CALIBRATION_METRICS = "calibration.json"
# What decides a PaddleSlim calibration besides the model and the images.
CALIBRATION_FIELDS = ("algo", "hist_percent", "bias_correction", "weight_quantize_type",
                      "batch_size", "batch_nums", "skip_tensors")


class Cache(Protocol):
    """Where calibrations and rankings are kept between runs (artifacts.cache.ContentCache)."""

    def get(self, digest: str) -> Path | None: ...

    def fill(self, digest: str) -> AbstractContextManager[Path]: ...


@dataclass
class Trial:
    index: int
    phase: str  # "recipe", "fall-back" or "restore"
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
    folder: Path = field(repr=False)  # PaddleSlim's model
    paddle2onnx_file: Path = field(repr=False)  # its conversion, before the lowering

    def record(self) -> dict:
        return {key: value for key, value in asdict(self).items() if key not in ("folder", "paddle2onnx_file")}


def _digest(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return digest.hexdigest()


def _files_digest(*paths: Path) -> str:
    return _digest(*(Path(path).read_bytes() for path in paths))


def _recipe_record(settings: QuantizeConfig) -> dict:
    """The recipe fields of `settings`, every one set (a QuantizeRecipe built from it reproduces them)."""
    return {name: getattr(settings, name) for name in QuantizeRecipe.model_fields}


class Search:
    """One search: its budget, its trials, and the calibrations it can reuse."""

    def __init__(self, config: QuantizeConfig, policy: GatePolicy, evaluate_config: EvaluateConfig,
                 model_dir: Path, splits_path: Path, scratch: Path, cache: Cache | None):
        self.config, self.policy, self.budget = config, policy, config.search
        self.model_dir, self.scratch, self.cache = Path(model_dir), scratch, cache
        self.started = time.monotonic()
        self.trials: list[Trial] = []
        self.failed_recipes: list[dict] = []  # recipes PaddleSlim (or the conversion) could not run
        splits = load_splits(splits_path)
        self.calibration_images = splits.x_calibration
        self.fp32_onnx = scratch / "fp32.onnx"
        to_onnx(self.model_dir / MODEL_FILE, self.model_dir / PARAMS_FILE, self.fp32_onnx)
        self.check = ValidationCheck(self.fp32_onnx, splits.x_validation, splits.y_validation,
                                     evaluate_config.threads, evaluate_config.batch_size)
        self.latency_batch = splits.x_validation[: evaluate_config.batch_size]
        self.threads = evaluate_config.threads
        self.inputs_digest = _digest(
            _files_digest(self.model_dir / MODEL_FILE, self.model_dir / PARAMS_FILE),
            np.ascontiguousarray(self.calibration_images).tobytes(),
            {library: installed_version(library) for library in ("paddlepaddle", "paddleslim", "paddle2onnx")},
        )
        self._calibrated: dict[str, Path] = {}  # this search's calibrations, by digest
        self._layers: dict[int, list[str]] = {}  # by base trial: the layers PaddleSlim quantized
        self._float_weights: dict | None = None  # every layer's float weight, from PaddleSlim with all skipped
        self._estimators: dict[tuple[str, ...], FallbackEstimator | None] = {}
        self.estimates: list[dict] = []  # fall-back sets scored without a PaddleSlim run
        self.validation_digest = _digest(np.ascontiguousarray(splits.x_validation).tobytes(),
                                         np.ascontiguousarray(splits.y_validation).tobytes())

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

    def calibrate(self, settings: QuantizeConfig, allow_float: bool = False) -> tuple[Path, str, bool]:
        """PaddleSlim's model for `settings`, from the cache when this exact calibration ran before.

        `allow_float`: a model with nothing quantized is an answer, not an error (every layer skipped).
        """
        digest = _digest(self.inputs_digest, {name: getattr(settings, name) for name in CALIBRATION_FIELDS})
        if digest in self._calibrated:
            return self._calibrated[digest], digest, True
        if self.cache is not None and (entry := self.cache.get(digest)) is not None:
            self._calibrated[digest] = entry
            return entry, digest, True
        if self.cache is None:
            folder = self.scratch / f"calibration-{digest[:16]}"
            folder.mkdir()
            self._run_paddleslim(settings, folder, allow_float)
        else:
            with self.cache.fill(digest) as staging:
                self._run_paddleslim(settings, staging, allow_float)
            folder = self.cache.get(digest)
            if folder is None:
                raise QuantizationError(f"the calibration cached as {digest[:12]} was damaged right after it was "
                                        "written; check the store's disk and run again")
        self._calibrated[digest] = folder
        return folder, digest, False

    def _run_paddleslim(self, settings: QuantizeConfig, folder: Path, allow_float: bool = False) -> None:
        result = quantize_with_images(settings, self.model_dir, MODEL_FILE, PARAMS_FILE, self.calibration_images,
                                      folder, allow_float=allow_float)
        (folder / CALIBRATION_METRICS).write_text(json.dumps(result.metrics, sort_keys=True, indent=2) + "\n")

    def run_trial(self, phase: str, recipe_settings: QuantizeConfig, float_layers: tuple[str, ...]) -> Trial:
        started = time.monotonic()
        settings = recipe_settings.with_recipe(QuantizeRecipe(), float_layers)
        calibration, digest, cached = self.calibrate(settings)
        folder = self.scratch / f"trial-{len(self.trials) + 1:03d}"
        folder.mkdir()
        raw = lowered_model(calibration, folder / "int8.onnx")
        validation = self.check.score(folder / "int8.onnx")
        latency = measure({"fp32": self.fp32_onnx, "int8": folder / "int8.onnx"}, self.latency_batch, self.threads,
                          self.budget.latency_repeats)
        metrics = {**validation, "speedup_int8_vs_fp32": latency["fp32"]["p50"] / latency["int8"]["p50"],
                   "latency_ms_p50_fp32": latency["fp32"]["p50"], "latency_ms_p50_int8": latency["int8"]["p50"]}
        failures = policy_failures(self.policy, metrics)
        trial = Trial(
            index=len(self.trials) + 1, phase=phase, recipe=_recipe_record(settings), float_layers=list(float_layers),
            validation=validation, passed=not failures, failures=failures,
            latency_ms_p50_fp32=latency["fp32"]["p50"], latency_ms_p50_int8=latency["int8"]["p50"],
            speedup_int8_vs_fp32=metrics["speedup_int8_vs_fp32"], seconds=time.monotonic() - started,
            calibration_cached=cached, calibration_digest=digest, folder=calibration, paddle2onnx_file=raw,
        )
        self.trials.append(trial)
        log.info("search trial %d (%s, %s, %d FP32 layers): drop %.2f pts, agreement %.4f, %.2fx -> %s",
                 trial.index, phase, trial.recipe["algo"], len(float_layers), validation["accuracy_drop_pts"],
                 validation["agreement"], trial.speedup_int8_vs_fp32, "passes" if trial.passed else "misses")
        return trial

    # -- ranking --------------------------------------------------------------------------

    def layers(self, base: Trial) -> list[str]:
        """The layers PaddleSlim quantized in the base trial (weight names, graph order), read once."""
        if base.index not in self._layers:
            self._layers[base.index] = quantized_layers(base.paddle2onnx_file, base.folder / Path(MODEL_FILE).stem)
        return self._layers[base.index]

    def estimator(self, base: Trial, base_settings: QuantizeConfig,
                  skipped: tuple[str, ...] = ()) -> FallbackEstimator | None:
        """What FP32 fall-backs of the base trial would score, from one extra PaddleSlim run (cached).

        `skipped`: layers whose fall-back cannot be assembled (`FallbackEstimator.float_weights` lacks
        them); the estimate then starts from a real PaddleSlim calibration with them skipped.
        """
        if skipped in self._estimators:
            return self._estimators[skipped]
        layers = self.layers(base)
        try:
            if self._float_weights is None:
                all_float, _, _ = self.calibrate(base_settings.with_recipe(QuantizeRecipe(), tuple(layers)),
                                                 allow_float=True)
                self._float_weights = float_weights(all_float)
            calibration, raw = base.folder, base.paddle2onnx_file
            if skipped:
                calibration = self.calibrate(base_settings.with_recipe(QuantizeRecipe(), skipped))[0]
                raw = self.scratch / f"estimate-base-{len(self._estimators)}.onnx"
                to_onnx(calibration / MODEL_FILE, calibration / PARAMS_FILE, raw)
            estimator = FallbackEstimator(raw, calibration, self._float_weights, self.check,
                                          [layer for layer in layers if layer not in skipped])
            if not skipped:
                log.info("search: FP32 fall-backs can be estimated for %d of %d layers; not for %s",
                         len(estimator.float_weights), len(layers),
                         ", ".join(sorted(set(layers) - set(estimator.float_weights))) or "none")
        except (StageError, RuntimeError, ValueError) as exc:
            log.warning("search: no fall-back estimates (%s); each layer is measured by a PaddleSlim run", exc)
            estimator = None
        self._estimators[skipped] = estimator
        return estimator

    def sensitivity(self, base: Trial, base_settings: QuantizeConfig,
                    estimator: FallbackEstimator | None) -> tuple[list[dict], bool]:
        """The base trial's layers, most sensitive first; cached by calibration inputs and validation data."""
        digest = _digest(base.calibration_digest, self.validation_digest, "fp32-fall-back ranking")
        if self.cache is not None and (entry := self.cache.get(digest)) is not None:
            return json.loads((entry / "ranking.json").read_text()), True
        scratch = self.scratch / f"ranking-{digest[:12]}"
        scratch.mkdir()
        layers = self.layers(base)
        estimable = set(estimator.float_weights) if estimator is not None else set()

        def score_without(layer: str) -> dict:
            if layer in estimable:
                return estimator.score((layer,))
            lowered = scratch / f"without-{layers.index(layer)}.onnx"  # a real PaddleSlim run
            lowered_model(self.calibrate(base_settings.with_recipe(QuantizeRecipe(), (layer,)))[0], lowered)
            return {**self.check.score(lowered), "measured_by": "paddleslim"}

        # The ranking may use half of the time left; the fall-back trials need the rest.
        deadline = time.monotonic() + (self.budget.timeout_s - self.elapsed_s()) / 2
        ranking, completeness = rank_layers(layers, score_without, base.validation, deadline)
        if self.cache is not None and completeness == "complete":
            with self.cache.fill(digest) as folder:
                (folder / "ranking.json").write_text(json.dumps(ranking, sort_keys=True, indent=2) + "\n")
        return ranking, False

    def estimate(self, float_layers: list[str], base: Trial, base_settings: QuantizeConfig) -> bool | None:
        """Whether the base trial with `float_layers` in FP32 would pass, by the estimate; None: cannot tell.

        The estimate has no latency of its own: it is judged with the base trial's speedup, which a
        fall-back can only lower, so a real trial still decides.
        """
        main = self.estimator(base, base_settings)
        if main is None or self.elapsed_s() >= self.budget.timeout_s:
            return None
        skipped = tuple(layer for layer in float_layers if layer not in main.float_weights)
        estimator = self.estimator(base, base_settings, skipped)
        if estimator is None:
            return None
        validation = estimator.score([layer for layer in float_layers if layer not in skipped])
        failures = policy_failures(self.policy, {**validation, "speedup_int8_vs_fp32": base.speedup_int8_vs_fp32})
        self.estimates.append({"float_layers": list(float_layers), "validation": validation, "passed": not failures})
        log.info("search estimate, %d FP32 layers: drop %.2f pts, agreement %.4f -> %s", len(float_layers),
                 validation["accuracy_drop_pts"], validation["agreement"], "passes" if not failures else "misses")
        return not failures

    def fewest_float_layers(self, order: list[str], limit: int, base: Trial, base_settings: QuantizeConfig) -> int:
        """The fewest leading layers of `order` whose FP32 fall-back the estimate says passes (else `limit`)."""
        for count in range(1, limit + 1):
            verdict = self.estimate(order[:count], base, base_settings)
            if verdict is None or verdict:
                return count  # passes, or from here on only real trials can tell
        return limit


def _closest_to_fp32(trial: Trial) -> tuple:
    """Sort key: accuracy lost (a gain counts as none), then disagreement, then logit error."""
    validation = trial.validation
    return (max(validation["accuracy_drop_pts"], 0.0), -validation["agreement"], validation["logit_error"])


def _kept(trials: list[Trial]) -> Trial:
    passing = [trial for trial in trials if trial.passed]
    if passing:
        return min(passing, key=lambda trial: (len(trial.float_layers), trial.latency_ms_p50_int8))
    return min(trials, key=_closest_to_fp32)


def _layer_costs(trials: list[Trial], kept: Trial) -> list[dict]:
    """Per FP32 layer of the kept trial: what it costs in speed, against the trial that had it in INT8.

    Each trial times its INT8 model next to FP32 in one process, so the cost is taken as a share of
    FP32's latency (INT8/FP32 with the layer in FP32 minus INT8/FP32 with it in INT8): drift of the
    machine between trials cancels out.
    """
    costs = []
    for layer in kept.float_layers:
        others = set(kept.float_layers) - {layer}
        twins = [trial for trial in trials if set(trial.float_layers) == others and trial.recipe == kept.recipe]
        twin = min(twins, key=lambda trial: trial.latency_ms_p50_int8 / trial.latency_ms_p50_fp32) if twins else None
        share = None if twin is None else 100 * (kept.latency_ms_p50_int8 / kept.latency_ms_p50_fp32
                                                  - twin.latency_ms_p50_int8 / twin.latency_ms_p50_fp32)
        costs.append({
            "layer": layer,
            "latency_cost_pct_of_fp32": share,
            "latency_cost_ms": None if share is None else share / 100 * kept.latency_ms_p50_fp32,
            "int8_passed_policy": None if twin is None else twin.passed,
            "measured_against_trial": None if twin is None else twin.index,
        })
    return costs


def search_quantization(
    config: QuantizeConfig, policy: GatePolicy, evaluate_config: EvaluateConfig, model_dir: Path, splits_path: Path,
    out_dir: Path, cache: Cache | None = None,
) -> QuantizeResult:
    """Run the search and write the kept PaddleSlim model and `search.json` to `out_dir`.

    Raises:
        QuantizationError / ConversionError: a calibration or conversion failed outright.
        ValueError: the validation split is empty.
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-search-") as scratch:
        search = Search(config, policy, evaluate_config, model_dir, splits_path, Path(scratch), cache)
        stopped, ranking, ranking_cached = _run(search)
        kept = _kept(search.trials)
        for name in (MODEL_FILE, PARAMS_FILE):
            shutil.copy2(kept.folder / name, Path(out_dir) / name)
        calibration = json.loads((kept.folder / CALIBRATION_METRICS).read_text())
    summary = {
        "strategy": "search",
        "passed": kept.passed,
        "stopped": stopped,
        "kept_trial": kept.index,
        "trials": len(search.trials),
        "wall_s": search.elapsed_s(),
        "budget": config.search.model_dump(mode="json", exclude={"recipes"}),
        "recipe": kept.recipe,
        "float_layers": kept.float_layers,
        "float_layer_costs": _layer_costs(search.trials, kept),
        "validation": kept.validation,
        "speedup_int8_vs_fp32": kept.speedup_int8_vs_fp32,
        "first_trial": {"passed": search.trials[0].passed, "validation": search.trials[0].validation},
        "calibrations_from_cache": sum(trial.calibration_cached for trial in search.trials),
        "failed_recipes": search.failed_recipes,
        "ranking_from_cache": ranking_cached,
        "fallback_estimates": len(search.estimates),
    }
    record = {**summary, "policy": policy.model_dump(mode="json"), "ranking": ranking,
              "fallback_estimates_detail": search.estimates,
              "trials_detail": [trial.record() for trial in search.trials]}
    (Path(out_dir) / SEARCH_FILE).write_text(json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n")
    log.info("search: %s after %d trials in %.0f s (%s); kept trial %d with %d FP32 layers",
             "passed" if kept.passed else "found nothing passing", len(search.trials), summary["wall_s"], stopped,
             kept.index, len(kept.float_layers))
    return QuantizeResult(MODEL_FILE, PARAMS_FILE, {**calibration, "search": summary})


def _run(search: Search) -> tuple[str, list[dict] | None, bool]:
    """The three phases; returns why the search stopped, and the ranking if one was made."""
    config = search.config
    for recipe in config.search.recipes:
        if (why := search.exhausted()) is not None:
            return why, None, False
        try:
            trial = search.run_trial("recipe", config.with_recipe(recipe), ())
        except (StageError, RuntimeError, TypeError, ValueError, AssertionError) as exc:
            # One recipe PaddleSlim cannot run must not end the search (a full store still does).
            search.failed_recipes.append({"recipe": recipe.model_dump(exclude_none=True),
                                          "error": f"{type(exc).__name__}: {exc}"[:1000]})
            log.warning("search: recipe %s failed and is skipped: %s", recipe.model_dump(exclude_none=True), exc)
            continue
        if trial.passed:
            return "a recipe passed with every layer in INT8", None, False
    if not search.trials:
        raise QuantizationError("no quantization recipe could run: " + "; ".join(
            f"{failed['recipe']}: {failed['error']}" for failed in search.failed_recipes))
    if config.search.max_float_layers == 0:
        return "no recipe passed and quantize.search.max_float_layers is 0", None, False
    base = min(search.trials, key=_closest_to_fp32)
    base_settings = config.with_recipe(QuantizeRecipe(**base.recipe))
    estimator = search.estimator(base, base_settings)
    ranking, cached = search.sensitivity(base, base_settings, estimator)
    order = [entry["layer"] for entry in ranking if entry["measured"]]
    limit = min(config.search.max_float_layers, len(order) - 1)  # at least one layer stays INT8
    start = 1 if estimator is None or limit < 1 else search.fewest_float_layers(order, limit, base, base_settings)
    passing: Trial | None = None
    for count in range(start, limit + 1):
        if (why := search.exhausted()) is not None:
            return why, ranking, cached
        trial = search.run_trial("fall-back", base_settings, tuple(order[:count]))
        if trial.passed:
            passing = trial
            break
    if passing is None:
        return f"no recipe passed, nor {limit} FP32 fall-backs", ranking, cached
    float_layers = list(passing.float_layers)
    for layer in reversed(passing.float_layers[:-1]):  # least sensitive first; the last one was just needed
        if (why := search.exhausted()) is not None:
            return f"passed; restoring stopped: {why}", ranking, cached
        fewer = tuple(name for name in float_layers if name != layer)
        if search.estimate(list(fewer), base, base_settings) is False:
            continue  # the estimate already says it misses: no PaddleSlim run for it
        if search.run_trial("restore", base_settings, fewer).passed:
            float_layers = list(fewer)
    return "passed with FP32 fall-backs", ranking, cached

