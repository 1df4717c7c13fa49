"""Accuracy-aware INT8: search PaddleSlim's recipes, then (if asked for) AdaRound, then FP32 fall-backs, until the
gate policy holds on the validation split, within a budget.

One trial = PaddleSlim calibration with one recipe and skip list -> paddle2onnx -> the lowering ->
accuracy on the validation split and latency against FP32, judged by the gate's own criteria
(`validation_check`). For a PIR model the calibration is quantgate's, on the export's FP32 ONNX graph
(`trials.Producer`, chosen once; a fall-back there is the layer's Q/DQ pairs dropped); the phases are the same.
The order, as Intel Neural Compressor and NNCF's accuracy control do it:

1. recipes (`quantize.search.recipes`), in order; the first is plain PTQ with quantize's settings.
   A recipe that passes with every layer quantized ends the search: other recipes build the same
   graph, so none can be faster.
2. if none passes and `quantize.search.recovery` is set (off by default): the recipe closest to FP32 once more
   with AdaRound (`adaround`), every layer still in INT8. It is off because on PP-OCRv4's recognizer it gained
   0.5 pt on one calibration split and lost 1.4 on another (paired p 0.02; docs/search.md); a setting still.
3. if that misses too (or did not run): groups of the closest trial reverted to FP32 (`fallback_groups`): a
   group is a layer (PaddleSlim's skip_tensor_list) and the grids that only feed it (the lowering drops them),
   ranked by estimates without a PaddleSlim run (`layer_sensitivity`; an AdaRound base on its nearest-rounding
   twin), reverted greedily with one real trial per revert, a revert undone when it does not bring the model
   closer to FP32, until a set passes, the estimate says reverting every remaining group cannot reach the
   policy, `max_float_layers` groups are in FP32, or the budget ends (with recovery's settings, each of these
   trials fits again);
4. once a fall-back set passes: each of its groups is tried back in INT8 (least sensitive
   first) and stays INT8 if the policy still holds; a set the estimate already fails costs no
   trial. These trials also measure what each FP32 layer costs in speed.

The kept trial is the fastest passing one (speed-up INT8/FP32, each trial's own ratio; fewest FP32 layers break a
tie). If none passes, the trial closest to FP32 is kept (`evidence`: McNemar on per-sample outcomes, then the
outputs' distance to FP32) and the search says so: the gate then fails it (`search_validation`), whatever the
test split says. PaddleSlim calibrations and rankings
are cached by content digest, so a rerun with the same inputs recomputes neither.

Trials calibrate on at most `quantize.search.trial_calibration_samples` rows, spread evenly over the
calibration split (on PP-OCRv4's recognizer a cold calibration costs ~1 s per line here). If that is
fewer than quantize's own setting calibrates on, the kept trial's recipe and FP32 layers are
calibrated once more on the full set and judged like a trial (phase "final"); that model is written
if it passes. If it misses where the subset model passed, the subset model is written and the
record and log say so; if neither passes, the one closer to FP32. The final calibration is not a
trial: `max_trials` and `timeout_s` bound the search, and do not stop the final step. With
`quantize.batch_nums` set, every trial calibrates on those batches and there is no final step.

This module runs the phases; a trial and the budget are in `trials`, how two trials are chosen between in
`evidence` (every choice is kept in `runner.decisions`), the ranking and estimates of phase 3 in
`fallback_ranking`, and what the search reports in `search_record`.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig, QuantizeRecipe
from quantgate.errors import StageError
from quantgate.int8.lower_int8 import Lowering
from quantgate.memory import BATCHES_KEY
from quantgate.samples.reading import open_data
from quantgate.stages.quantize import evidence
from quantgate.stages.quantize.candidate_cache import CALIBRATION_METRICS, Cache
from quantgate.stages.quantize.fallback_groups import CANDIDATE_FAILURES, attempt, candidates, revert_groups
from quantgate.stages.quantize.fallback_ranking import FallbackRanking
from quantgate.stages.quantize.memory_fit import CALIBRATION_LOOP, calibration_choice, choice_record, fitted
from quantgate.stages.quantize.outputs import SEARCH
from quantgate.stages.quantize.ptq import QuantizationError, QuantizeResult
from quantgate.stages.quantize.search_record import (
    FinalCalibration,
    SearchOutcome,
    search_summary,
    write_search_record,
)
from quantgate.stages.quantize.trials import VALIDATION_LOOP, Trial, TrialRunner
from quantgate.stages.quantize.validation_check import samples_to_show

log = logging.getLogger(__name__)


def search_quantization(
    config: QuantizeConfig, policy: GatePolicy, evaluate_config: EvaluateConfig, model_dir: Path, data_dir: Path,
    out_dir: Path, cache: Cache | None = None, num_workers: int = 0, lowering: Lowering = Lowering(),
) -> QuantizeResult:
    """Run the search and write the kept model (PaddleSlim's program; for a PIR export the raw calibrated ONNX graph
    and its program scales, as `strategy: single` writes them) and `search.json` to `out_dir`.

    The model written is the kept recipe calibrated on quantize's own rows (see the module's docstring);
    the manifest's calibration metrics are that model's.

    `data_dir`: the data stage's folder; its calibration and validation splits are streamed, decoded by
    `num_workers` processes for image folders (0: in this process). `lowering`: how the convert stage will
    lower the model (`convert.weight_range` for this CPU, `convert.hardswish_grids`); every trial is lowered
    and judged so.

    Raises:
        QuantizationError / ConversionError: a calibration or conversion failed outright.
        ValueError: the validation split is empty.
        DataError: `data_dir` is not a data stage's output, or an image changed since the data stage.
    """
    data = open_data(data_dir)
    requested, calibration_batch = config, calibration_choice(config, model_dir, data)
    validation_needed = samples_to_show(policy, data.size("validation"))
    if validation_needed["short"]:
        log.warning("search: the validation split has %d samples, too few to show %s (needs %s): a trial can pass "
                    "there and miss on the test split; give data more validation samples (data.validation_fraction)",
                    validation_needed["samples"], " and ".join(validation_needed["short"]),
                    ", ".join(f"{validation_needed['needed'][name]} for {name}" for name in validation_needed["short"]))
    config = fitted(config, calibration_batch)  # every trial and the final calibration at the batch that fits
    with tempfile.TemporaryDirectory(prefix="quantgate-search-") as scratch:
        runner = TrialRunner(config, policy, evaluate_config, model_dir, data_dir, Path(scratch), cache, num_workers,
                             lowering)
        outcome = _run(runner)
        kept = _decided(runner, "kept trial", evidence.kept(runner.trials))
        final = _final(runner, kept)
        written = kept if final is None else final.written
        written_files = runner.producer.written_files  # PaddleSlim's program, or the calibrated ONNX graph
        for name in written_files:
            shutil.copy2(written.folder / name, Path(out_dir) / name)
        calibration = json.loads((written.folder / CALIBRATION_METRICS).read_text())  # the written model's
    summary = search_summary(config, runner, kept, outcome, final, validation_needed)
    write_search_record(out_dir, summary, policy, outcome, runner.trials, final)
    log.info("search: %s after %d trials in %.0f s (%s); kept trial %d with %d FP32 layers, calibrated on %d samples",
             "passed" if written.passed else "found nothing passing", len(runner.trials), summary["wall_s"],
             outcome.stopped, kept.index, len(kept.float_layers), written.calibration_samples)
    if final is not None and final.trial.passed:
        log.info("search: %s", final.note)
    elif final is not None:  # the full set, as configured, did worse than the rows the search judged
        log.warning("search: %s", final.note)
    batches = {CALIBRATION_LOOP: choice_record(requested, calibration_batch),
               VALIDATION_LOOP: runner.validation_batch.record()}
    return QuantizeResult(*written_files, {**calibration, SEARCH: summary, BATCHES_KEY: batches})


def _decided(runner: TrialRunner, purpose: str, chosen: tuple[Trial, list[dict]]) -> Trial:
    """`chosen`'s trial; its decisions kept in `runner.decisions`, tagged with what they chose (`purpose`)."""
    trial, made = chosen
    runner.decisions.extend({"purpose": purpose, **entry} for entry in made)
    return trial


def _final(runner: TrialRunner, kept: Trial) -> FinalCalibration | None:
    """The full-set calibration of `kept` and which model is written (None: the trials' rows were the full set,
    or the full-set calibration could not be built, which the log and `failed_recipes` say: the subset model is
    written)."""
    try:
        trial = runner.final_trial(kept)
    except CANDIDATE_FAILURES as exc:
        runner.failed_recipes.append({"phase": "final", "recipe": kept.recipe, "float_layers": kept.float_layers,
                                      "error": f"{type(exc).__name__}: {exc}"[:1000]})
        log.warning("search: the full-set calibration of trial %d failed (%s); the trials' calibration is written",
                    kept.index, exc)
        return None
    return None if trial is None else written_model(kept, trial, runner.decisions)


def written_model(kept: Trial, final: Trial, decisions: list[dict] | None = None) -> FinalCalibration:
    """Which model the stage writes: the full-set `final` if it passes, else the subset `kept` if that passed,
    else the one closer to FP32 (that decision added to `decisions` when given)."""
    full = f"the full-set calibration ({final.calibration_samples} samples)"
    subset = f"the trials' calibration ({kept.calibration_samples} samples)"
    if final.passed:
        return FinalCalibration(final, final, f"{full} passes the policy and is written")
    if kept.passed:
        return FinalCalibration(final, kept, f"{full} MISSES the policy where {subset} passed "
                                             f"({'; '.join(final.failures)}); {subset} is written instead")
    closer, made = evidence.closest([final, kept])
    if decisions is not None:
        decisions.extend({"purpose": "written model", **entry} for entry in made)
    return FinalCalibration(final, closer, f"neither {full} nor {subset} passes; "
                                           f"{full if closer is final else subset} is closer to FP32 and written")


def _run(runner: TrialRunner) -> SearchOutcome:
    """The four phases; says why the search stopped, with the ranking if one was made."""
    stopped = _try_recipes(runner)
    if stopped is not None:
        return SearchOutcome(stopped)
    if (why := runner.exhausted()) is not None:  # the last recipe may end past the budget
        return SearchOutcome(why)
    if (stopped := _recover(runner)) is not None:
        return SearchOutcome(stopped)
    recovered = any(trial.phase == "recovery" for trial in runner.trials)
    if runner.config.search.max_float_layers == 0:
        return SearchOutcome(f"no recipe passed{', nor recovery' if recovered else ''}, and "
                             "quantize.search.max_float_layers is 0")
    if (why := runner.exhausted()) is not None:
        return SearchOutcome(why)
    base = _decided(runner, "fall-back base", evidence.closest(runner.trials))
    fallbacks = FallbackRanking(runner, base, runner.config.with_recipe(QuantizeRecipe(**base.recipe)))
    ranking, cached = None, False
    try:
        estimator = fallbacks.estimator()
        ranking, cached = fallbacks.sensitivity(estimator)
        stopped = _fall_back(runner, fallbacks, ranking)
    except CANDIDATE_FAILURES as exc:
        # Trials were judged already: the closest is kept and the gate fails it, which is what a search out of
        # ideas ends with. Never "the pipeline broke" (exit 3) for a fall-back that could not be built.
        runner.failed_recipes.append({"phase": "fall-back", "recipe": base.recipe,
                                      "error": f"{type(exc).__name__}: {exc}"[:1000]})
        log.warning("search: the fall-back phase failed and ends the search: %s", exc)
        stopped = (f"no recipe passed, and the fall-back phase failed ({type(exc).__name__}: {str(exc)[:300]}); "
                   "the trial closest to FP32 is kept")
    return SearchOutcome(stopped, ranking, cached, fallbacks.estimates)


def _try_recipes(runner: TrialRunner) -> str | None:
    """Phase 1: each recipe with every layer in INT8; why the search stops here, or None to go on.

    Raises:
        QuantizationError: not one recipe could run.
    """
    for recipe in runner.config.search.recipes:
        if (why := runner.exhausted()) is not None:
            return why
        try:
            trial = runner.run_trial("recipe", runner.config.with_recipe(recipe), ())
        except (StageError, RuntimeError, TypeError, ValueError, AssertionError) as exc:
            # One recipe PaddleSlim cannot run must not end the search (a full store still does).
            runner.failed_recipes.append({"recipe": recipe.model_dump(exclude_none=True),
                                          "error": f"{type(exc).__name__}: {exc}"[:1000]})
            log.warning("search: recipe %s failed and is skipped: %s", recipe.model_dump(exclude_none=True), exc)
            continue
        if trial.passed:
            return "a recipe passed with every layer in INT8"
    if not runner.trials:
        raise QuantizationError("no quantization recipe could run: " + "; ".join(
            f"{failed['recipe']}: {failed['error']}" for failed in runner.failed_recipes))
    return None


def _recover(runner: TrialRunner) -> str | None:
    """Phase 2: the closest recipe again with AdaRound; why the search stops here, or None to go on."""
    if not runner.config.search.recovery:
        return None  # switched off (the default)
    nearest = _decided(runner, "recovery base", evidence.closest(runner.trials))
    if nearest.recipe["rounding"] == "adaptive":
        return None  # the recipes were fitted already (quantize.rounding 'adaptive')
    recipe = QuantizeRecipe(**{**nearest.recipe, "rounding": "adaptive"})
    try:
        trial = runner.run_trial("recovery", runner.config.with_recipe(recipe), ())
    except (StageError, RuntimeError, TypeError, ValueError, AssertionError) as exc:
        runner.failed_recipes.append({"recipe": recipe.model_dump(exclude_none=True),
                                      "error": f"{type(exc).__name__}: {exc}"[:1000]})
        log.warning("search: recovery (AdaRound) failed and is skipped: %s", exc)
        return None
    return "passed after recovery (AdaRound), every layer in INT8" if trial.passed else None


def _fall_back(runner: TrialRunner, fallbacks: FallbackRanking, ranking: list[dict]) -> str:
    """Phase 3: groups reverted to FP32 greedily until a set passes (`fallback_groups`); then phase 4."""
    if not any(entry["measured"] for entry in ranking):
        return ("no recipe passed, and the time left ran out before any layer was ranked for an FP32 fall-back "
                "(raise quantize.search.timeout_s)" if ranking else "no recipe passed, and no layer can fall back")
    order = candidates(ranking)
    if not order:
        return ("no recipe passed, and no group's FP32 fall-back brings the model closer to FP32 by the estimate: "
                "reverting cannot reach the policy")
    limit = min(runner.config.search.max_float_layers, len(fallbacks.layers()) - 1)  # one layer at least stays INT8
    passing, stopped = revert_groups(runner, fallbacks, order, limit)
    return stopped if passing is None else _restore_int8_layers(runner, fallbacks, passing)


def _restore_int8_layers(runner: TrialRunner, fallbacks: FallbackRanking, passing: Trial) -> str:
    """Phase 4: each FP32 group of the passing set back in INT8, kept there if the policy still holds."""
    float_layers = list(passing.float_layers)
    groups = passing.float_groups or {}
    for layer in reversed(passing.float_layers[:-1]):  # least sensitive first; the last one was just needed
        if (why := runner.exhausted()) is not None:
            return f"passed with FP32 groups {', '.join(float_layers)}; restoring stopped: {why}"
        fewer = tuple(name for name in float_layers if name != layer)
        if fallbacks.estimate(list(fewer)) is False:
            continue  # the estimate already says it misses: no PaddleSlim run for it
        restored = attempt(runner, "restore", fallbacks.base_settings, fewer,
                           {name: groups.get(name, []) for name in fewer})
        if restored is not None and restored.passed:
            float_layers = list(fewer)
    return f"passed with FP32 groups {', '.join(float_layers)}"
