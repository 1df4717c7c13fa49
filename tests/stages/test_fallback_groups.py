"""FP32 fall-backs revert groups: a layer and the grids that only feed it, greedily, undoing a revert that hurts.

The grids are checked on a tiny real network (PaddleSlim -> paddle2onnx -> the lowering -> onnxruntime) with
PP-LCNetV3's pattern: conv, BatchNorm, a HardSwish between learnable affines, a residual Add, and a 1x1 conv
after a HardSwish of the block's output (`lab_residual`). The greedy loop is quantgate's own logic, so a
scripted runner and estimate stand in for PaddleSlim there (as in test_search_steps.py).
"""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.pattern_nets import pattern_model

from quantgate.config import QuantizeConfig
from quantgate.int8.lower_int8 import Lowering, lower_int8
from quantgate.int8.errors import ConversionError
from quantgate.int8.paddle_quantization import quantized_layers
from quantgate.stages.quantize.fallback_groups import candidates, revert_groups
from quantgate.stages.quantize.layer_sensitivity import FallbackEstimator, float_weights
from quantgate.stages.quantize.trials import Trial

HEAD = "conv2d_2.w_0"  # the 1x1 conv after HardSwish(residual block) -> affine


def grids(onnx_file: Path) -> int:
    """Q/DQ nodes on activations (weights and biases are constants)."""
    graph = onnx.load(str(onnx_file)).graph
    constants = {init.name for init in graph.initializer}
    counts = Counter(node.op_type for node in graph.node
                     if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.input[0] not in constants)
    return counts["QuantizeLinear"] + counts["DequantizeLinear"]


def logits(onnx_file: Path, images: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    """The net quantized whole, with its head conv skipped (PaddleSlim's skip list), and with every layer skipped."""
    root = tmp_path_factory.mktemp("groups")
    base = pattern_model("lab_residual", root / "base")
    layers = quantized_layers(base.raw_onnx, base.paddle_prefix)
    return root, base, layers, pattern_model("lab_residual", root / "head", skip=(HEAD,)), \
        pattern_model("lab_residual", root / "all", skip=tuple(layers))


def test_reverting_a_group_removes_the_grids_that_only_fed_its_layer(residual):
    root, base, layers, head, _ = residual
    assert HEAD in layers
    bare, group = root / "bare.onnx", root / "group.onnx"
    lower_int8(head.raw_onnx, bare, paddle_model_prefix=head.paddle_prefix, hardswish_grids=True, float_groups=False)
    metrics = lower_int8(head.raw_onnx, group, paddle_model_prefix=head.paddle_prefix, hardswish_grids=True).metrics
    # PaddleSlim's skip leaves the residual Add's output grid in front of the float HardSwish, and the grid of the
    # block's conv branch that only that Add reads; the group drops both
    dropped = metrics["float_group_grids"][HEAD]
    quantized = {node.input[0] for node in onnx.load(str(bare)).graph.node if node.op_type == "QuantizeLinear"}
    assert len(dropped) == 2 and set(dropped) <= quantized
    assert grids(group) <= grids(bare) - 2 * len(dropped)  # a QuantizeLinear and a DequantizeLinear each, at least
    assert Counter(node.op_type for node in onnx.load(str(group)).graph.node)["HardSwish"] == 2  # both float now
    # the grid another INT8 consumer needs (the block's input, read by the block's HardSwish too) stays
    assert "conv2d_0.tmp_0" in quantized and "conv2d_0.tmp_0" not in dropped
    # and the float region is closer to FP32 than the bare skip
    fp32 = logits(base.fp32_onnx, base.inputs)
    assert np.abs(logits(group, base.inputs) - fp32).mean() < np.abs(logits(bare, base.inputs) - fp32).mean()


def test_the_estimate_of_a_group_revert_is_the_real_skip_with_its_grids_dropped(residual):
    root, base, layers, head, every = residual
    lowering = Lowering(hardswish_grids=True)
    estimator = FallbackEstimator(base.raw_onnx, base.paddle_prefix.parent, float_weights(every.paddle_prefix.parent),
                                  None, layers, lowering)
    assert HEAD in estimator.float_weights
    group = estimator.group_grids(HEAD)  # the head's own input grid (PaddleSlim's skip) and the one feeding it
    real = lower_int8(head.raw_onnx, root / "real.onnx", paddle_model_prefix=head.paddle_prefix,
                      **lowering.options()).metrics["float_group_grids"][HEAD]
    assert set(real) < set(group) and len(group) == len(real) + 1  # + the head's input grid, gone from the skip
    estimate = estimator.model([HEAD], root / "estimate.onnx")
    # no grid the group drops is left in the estimate (paddle2onnx writes the real skip's bias as an Add between
    # grids of its own, so the counts differ; the values below do not)
    assert not set(group) & {node.input[0] for node in onnx.load(str(estimate)).graph.node
                             if node.op_type == "QuantizeLinear"}
    lower_int8(base.raw_onnx, root / "int8.onnx", paddle_model_prefix=base.paddle_prefix, **lowering.options())
    estimated, measured, int8 = (logits(path, base.inputs) for path in (estimate, root / "real.onnx", root / "int8.onnx"))
    # the real skip rounds the head's output once more before its bias (paddle2onnx's separate Add), so the two
    # are not equal to float rounding; the estimate is still far closer to it than the model it started from
    assert np.abs(estimated - measured).mean() < 0.25 * np.abs(int8 - measured).mean()


# -- the greedy loop, scripted -------------------------------------------------------------------------------------

POLICY_DROP = 0.5


class ScriptedRunner:
    """Each FP32 set's validation drop is given; a trial passes within POLICY_DROP."""

    def __init__(self, drops: dict[frozenset, float], max_trials: int = 12, unbuildable: frozenset = frozenset()):
        self.drops, self.max_trials, self.unbuildable = drops, max_trials, unbuildable
        self.trials: list[Trial] = []
        self.decisions: list[dict] = []
        self.failed_recipes: list[dict] = []

    def exhausted(self) -> str | None:
        return f"max_trials ({self.max_trials}) reached" if len(self.trials) >= self.max_trials else None

    def run_trial(self, phase, settings, float_layers, float_groups=None) -> Trial:
        if frozenset(float_layers) in self.unbuildable:  # as the lowering refuses a pattern it does not understand
            raise ConversionError("onnxruntime could not lower int8.onnx with PaddleSlim's scales: 'conv2d_7.tmp_0'")
        drop = self.drops[frozenset(float_layers)]
        trial = Trial(len(self.trials) + 1, phase, {}, list(float_layers),
                      {"accuracy_drop_pts": drop, "agreement": 1 - drop / 100, "logit_error": drop / 10},
                      drop <= POLICY_DROP, [] if drop <= POLICY_DROP else [f"drop {drop}"], 10.0, 5.0, 2.0,
                      seconds=10.0, calibration_cached=False, calibration_digest="", calibration_samples=64,
                      calibration_s=1.0, statistics_reused=False, folder=Path("."), paddle2onnx_file=Path("."),
                      float_groups=float_groups)
        self.trials.append(trial)
        return trial


class ScriptedFallbacks:
    """FallbackRanking's interface for `revert_groups`: groups' grids, and a verdict per estimated set."""

    def __init__(self, base: Trial, reachable: bool = True):
        self.base, self.base_settings, self.reachable = base, QuantizeConfig(), reachable
        self.estimates: list[dict] = []

    def groups(self, layers):
        return {layer: [f"{layer}.input_grid"] for layer in layers}

    def estimate(self, float_layers):
        self.estimates.append({"float_layers": list(float_layers), "passed": self.reachable,
                               "validation": {"accuracy_drop_pts": 1.5, "agreement": 0.985}})
        return self.reachable


def base_trial(runner: ScriptedRunner) -> Trial:
    return runner.run_trial("recipe", None, ())


def test_a_revert_that_moves_the_model_away_from_fp32_is_undone_and_the_next_group_tried():
    # reverting 'b' costs accuracy (its float region is what a calibration fitted around): undone
    runner = ScriptedRunner({frozenset(): 3.0, frozenset("a"): 2.0, frozenset("ab"): 6.0, frozenset("ac"): 0.4})
    passing, stopped = revert_groups(runner, ScriptedFallbacks(base_trial(runner)), ["a", "b", "c"], limit=3)
    assert [trial.float_layers for trial in runner.trials[1:]] == [["a"], ["a", "b"], ["a", "c"]]
    assert passing is runner.trials[-1] and stopped == "passed with FP32 groups a, c"
    assert passing.float_groups == {"a": ["a.input_grid"], "c": ["c.input_grid"]}  # recorded on the trial
    assert [decision["purpose"] for decision in runner.decisions] == ["fall-back revert"] * 2


def test_the_search_stops_when_the_estimate_says_reverting_every_remaining_group_cannot_reach_the_policy():
    runner = ScriptedRunner({frozenset(): 3.0})
    fallbacks = ScriptedFallbacks(base_trial(runner), reachable=False)
    passing, stopped = revert_groups(runner, fallbacks, ["a", "b", "c"], limit=8)
    assert passing is None and len(runner.trials) == 1  # not one trial spent
    assert stopped.startswith("reverting more cannot reach the policy: the estimate with 3 groups in FP32 (a, b, c)")
    assert "drop 1.50 pts" in stopped and "FP32 groups kept: none" in stopped
    assert fallbacks.estimates[0]["float_layers"] == ["a", "b", "c"]


def test_every_stop_names_the_groups_left_in_fp32():
    drops = {frozenset(): 3.0, frozenset("a"): 2.0, frozenset("ab"): 1.0, frozenset("abc"): 0.9}
    runner = ScriptedRunner(drops)
    _, stopped = revert_groups(runner, ScriptedFallbacks(base_trial(runner)), ["a", "b", "c", "d"], limit=3)
    assert stopped == ("no fall-back set passed within quantize.search.max_float_layers (3) FP32 groups; "
                       "FP32 groups kept: a, b, c; undone: none")
    budget = ScriptedRunner(drops, max_trials=3)
    _, stopped = revert_groups(budget, ScriptedFallbacks(base_trial(budget)), ["a", "b", "c"], limit=3)
    assert stopped == "max_trials (3) reached; FP32 groups kept: a, b; undone: none"


def test_only_groups_the_estimate_says_bring_the_model_closer_are_candidates():
    ranking = [{"layer": "a", "measured": True, "logit_error_removed": 0.2, "accuracy_pts_recovered": 1.0},
               {"layer": "b", "measured": True, "logit_error_removed": -0.01, "accuracy_pts_recovered": 0.0},
               {"layer": "c", "measured": False}]
    assert candidates(ranking) == ["a"]


def test_a_fall_back_set_that_cannot_be_built_is_undone_and_the_search_goes_on():
    # The bar's run ended with exit 3 ("the pipeline broke") in the fall-back phase: one candidate the conversion
    # could not build ended the whole run. A candidate that cannot be built is one idea fewer, nothing more.
    runner = ScriptedRunner({frozenset(): 3.0, frozenset("ac"): 0.4, frozenset("a"): 2.0},
                            unbuildable=frozenset({frozenset("ab")}))
    passing, stopped = revert_groups(runner, ScriptedFallbacks(base_trial(runner)), ["a", "b", "c"], limit=3)
    assert passing is not None and passing.float_layers == ["a", "c"] and stopped == "passed with FP32 groups a, c"
    assert [(failed["phase"], failed["float_layers"]) for failed in runner.failed_recipes] == [("fall-back", ["a", "b"])]
    assert "ConversionError" in runner.failed_recipes[0]["error"]
