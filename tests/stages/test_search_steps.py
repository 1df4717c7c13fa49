"""The order of the INT8 search's steps (recipes -> recovery -> fall-backs), what it reports per step, and when it
warns that the validation split is too small.

The step logic is quantgate's own, so a scripted trial runner stands in for PaddleSlim here: each trial's
verdict and validation numbers are set by its settings. The real trials (PaddleSlim, paddle2onnx, onnxruntime)
run in test_quantize_search.py, whose broken digits CNN goes through every step.
"""

from pathlib import Path

import pytest

from quantgate.config import GatePolicy, QuantizeConfig
from quantgate.stages.quantize.search import _run
from quantgate.stages.quantize.search_record import next_step, step_record
from quantgate.stages.quantize.trials import Trial, closest
from quantgate.stages.quantize.validation_check import samples_to_show

RECIPES = [{}, {"algo": "mse"}]
# validation drop in points by (algo, rounding): mse is the closer recipe, AdaRound takes 1 point back
DROPS = {("hist", "nearest"): 2.5, ("mse", "nearest"): 1.5, ("mse", "adaptive"): 0.4, ("hist", "adaptive"): 1.0}


class ScriptedRunner:
    """TrialRunner's interface for `_run`'s first two phases; a trial passes when its drop is within `max_drop`."""

    def __init__(self, max_drop: float, fail_adaptive: bool = False, **search):
        # recovery is off by default; these tests are about the step it adds, so it is asked for unless said
        self.config = QuantizeConfig(search={"recipes": RECIPES, "max_float_layers": 0, "recovery": True, **search})
        self.max_drop, self.fail_adaptive = max_drop, fail_adaptive
        self.trials: list[Trial] = []
        self.decisions: list[dict] = []
        self.failed_recipes: list[dict] = []

    def exhausted(self) -> str | None:
        return "max_trials reached" if len(self.trials) >= self.config.search.max_trials else None

    def run_trial(self, phase: str, settings: QuantizeConfig, float_layers: tuple) -> Trial:
        if self.fail_adaptive and settings.rounding == "adaptive":
            raise RuntimeError("AdaRound could not fit layer conv2d_3")
        drop = DROPS[(settings.algo, settings.rounding)]
        recipe = {name: getattr(settings, name) for name in
                  ("algo", "hist_percent", "bias_correction", "weight_quantize_type", "rounding")}
        trial = Trial(len(self.trials) + 1, phase, recipe, list(float_layers),
                      {"accuracy_drop_pts": drop, "agreement": 1 - drop / 100, "logit_error": drop},
                      drop <= self.max_drop, [] if drop <= self.max_drop else [f"drop {drop}"], 10.0, 5.0, 2.0,
                      seconds=100.0 + 200.0 * (settings.rounding == "adaptive"), calibration_cached=False,
                      calibration_digest="", calibration_samples=64, calibration_s=1.0, statistics_reused=False,
                      folder=Path("."), paddle2onnx_file=Path("."))
        self.trials.append(trial)
        return trial


def phases(runner: ScriptedRunner) -> list[tuple[str, str, str]]:
    return [(trial.phase, trial.recipe["algo"], trial.recipe["rounding"]) for trial in runner.trials]


def test_a_passing_recipe_ends_the_search_without_recovery():
    runner = ScriptedRunner(max_drop=2.0)
    outcome = _run(runner)
    assert phases(runner) == [("recipe", "hist", "nearest"), ("recipe", "mse", "nearest")]
    assert "recipe passed" in outcome.stopped


def test_when_every_recipe_misses_recovery_fits_the_closest_one_and_a_pass_stops_the_search():
    runner = ScriptedRunner(max_drop=0.5)
    outcome = _run(runner)
    assert phases(runner) == [("recipe", "hist", "nearest"), ("recipe", "mse", "nearest"),
                              ("recovery", "mse", "adaptive")]
    assert runner.trials[-1].passed and "recovery" in outcome.stopped


def test_a_recovery_that_misses_goes_on_to_the_fall_backs():
    runner = ScriptedRunner(max_drop=0.1)
    outcome = _run(runner)
    assert [trial.phase for trial in runner.trials] == ["recipe", "recipe", "recovery"]
    assert outcome.stopped == "no recipe passed, nor recovery, and quantize.search.max_float_layers is 0"


def test_recovery_switched_off_or_already_asked_for_adds_no_trial():
    off = ScriptedRunner(max_drop=0.5, recovery=False)
    _run(off)
    assert [trial.phase for trial in off.trials] == ["recipe", "recipe"]
    fitted = ScriptedRunner(max_drop=0.1)
    fitted.config = fitted.config.model_copy(update={"rounding": "adaptive"})  # every recipe fits already
    _run(fitted)
    assert phases(fitted) == [("recipe", "hist", "adaptive"), ("recipe", "mse", "adaptive")]


def test_an_exhausted_budget_starts_no_recovery():
    runner = ScriptedRunner(max_drop=0.5, max_trials=2)
    outcome = _run(runner)
    assert [trial.phase for trial in runner.trials] == ["recipe", "recipe"] and "max_trials" in outcome.stopped


def test_a_recovery_that_fails_to_run_is_recorded_and_the_search_goes_on():
    runner = ScriptedRunner(max_drop=0.5, fail_adaptive=True)
    _run(runner)
    assert [trial.phase for trial in runner.trials] == ["recipe", "recipe"]
    assert runner.failed_recipes[0]["recipe"]["rounding"] == "adaptive"
    assert "conv2d_3" in runner.failed_recipes[0]["error"]


def test_each_step_reports_its_cost_and_what_it_gained_over_the_steps_before():
    runner = ScriptedRunner(max_drop=0.5)
    _run(runner)
    recipes, recovery = step_record(runner.trials)
    assert (recipes["trials"], recipes["seconds"], recipes["closest_trial"]) == (2, 200.0, 2)
    assert recipes["gain_pts"] is None and not recipes["passed"]
    assert (recovery["trials"], recovery["seconds"], recovery["passed"]) == (1, 300.0, True)
    assert recovery["gain_pts"] == pytest.approx(1.1) and recovery["gain_agreement"] == pytest.approx(0.011)


def test_when_nothing_passes_the_next_step_is_named_with_its_measured_cost():
    runner = ScriptedRunner(max_drop=0.1)
    outcome = _run(runner)
    assert "max_float_layers (0)" in next_step(runner.config, runner.trials, outcome.stopped)
    assert "167 s" in next_step(runner.config, runner.trials, outcome.stopped)  # (100 + 100 + 300) / 3
    off = ScriptedRunner(max_drop=0.1, recovery=False)
    outcome = _run(off)
    assert "quantize.search.recovery true" in next_step(off.config, off.trials, outcome.stopped)
    assert "timeout_s" in next_step(off.config, off.trials, "timeout (1800 s) reached")


@pytest.mark.parametrize(("samples", "short"), [(200, ["min_agreement"]), (300, []), (199, ["max_accuracy_drop",
                                                                                             "min_agreement"])])
def test_a_validation_split_too_small_to_show_the_policy_is_named(samples, short):
    policy = GatePolicy(max_accuracy_drop=0.5, min_agreement=0.99)
    shown = samples_to_show(policy, samples)
    # the rule of three: 0 disagreements in 300 samples bound the rate below 1 % at 95 %; one sample in 200 is 0.5 pt
    assert shown["needed"] == {"min_agreement": 300, "max_accuracy_drop": 200} and shown["short"] == short


def scored(drop: float, logit_error: float, samples: int = 200) -> Trial:
    runner = ScriptedRunner(max_drop=0.0)
    trial = runner.run_trial("recipe", runner.config, ())
    trial.validation = {"accuracy_drop_pts": drop, "agreement": 1 - drop / 100, "logit_error": logit_error,
                        "validation_samples": samples}
    return trial


def test_drops_a_few_samples_apart_do_not_decide_the_closest_trial_the_outputs_do():
    one_line_fewer, closer_outputs, far = scored(1.5, 0.0425), scored(2.0, 0.0375), scored(3.5, 0.0100)
    # 200 samples: 1 line is 0.5 pt, within the 3 samples (1.5 pts) that tell nothing; 4 lines do
    assert closest([one_line_fewer, closer_outputs, far]) is closer_outputs
    # on 2,000 samples the same drops are 10 lines apart: the drop decides
    assert closest([scored(1.5, 0.0425, 2000), scored(2.0, 0.0375, 2000)]).validation["logit_error"] == 0.0425
