"""The accuracy-aware INT8 search, on a digits CNN that plain PTQ provably breaks.

The broken model computes what a trained one does in float, but one of its layers cannot be
quantized: channel 5 of the second block is switched off (BatchNorm gamma = beta = 0, so the ReLU
outputs exactly 0 there), and the third convolution's weights reading that channel are set 1000x
larger than any other weight. They multiply zeros, so FP32 does not change; but every output
channel's int8 weight scale is then set by them, and every real weight rounds to 0. No calibration
recipe touches that (they calibrate activations); leaving the third convolution in FP32 does.
"""

import json

import numpy as np
import onnx
import paddle
import pytest
from support.cpu import needs_int8_dot_product

from quantgate.artifacts.cache import ContentCache
from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig
from quantgate.models.models import build_model
from quantgate.policy.decision import decide
from quantgate.stages.data import open_data
from quantgate.stages.export.inference_model import export
from quantgate.stages.quantize.outputs import FRONTIER, POLICY_COST, POLICY_MAX_DROP, SEARCH_FILE
from quantgate.stages.quantize.search import search_quantization

OUTLIER = 1000.0
CHANNEL = 5
STRICT = GatePolicy(max_accuracy_drop=1.0, min_agreement=0.97, min_speedup=0.0)
EVALUATE = EvaluateConfig(latency_repeats=3)
RECIPES = [{}, {"algo": "mse"}]  # plain PTQ, then one other calibration: both miss


@pytest.fixture(scope="module")
def broken_export(stage_dirs, tmp_path_factory):
    """A trained digits CNN whose third convolution cannot be quantized; its float function is intact."""
    folder = tmp_path_factory.mktemp("broken")
    with np.load(stage_dirs.train / "weights.npz") as stored:
        weights = {name: stored[name].copy() for name in stored.files}
    weights["features.4.weight"][CHANNEL] = 0.0  # BatchNorm after the second convolution: channel off
    weights["features.4.bias"][CHANNEL] = 0.0
    conv = weights["features.6.weight"]
    conv[:, CHANNEL] = OUTLIER * np.abs(conv).max()  # reads only zeros
    np.savez(folder / "weights.npz", **weights)
    data = open_data(stage_dirs.data)
    model = build_model("digits_cnn", data.num_classes, data.input_shape)
    model.set_state_dict({name: paddle.to_tensor(array) for name, array in weights.items()})
    model.eval()
    np.save(folder / "reference_logits.npy", model(paddle.to_tensor(data.array("test")[0])).numpy())
    (folder / "export").mkdir()
    export(folder / "weights.npz", folder / "reference_logits.npy", stage_dirs.data, "digits_cnn", folder / "export")
    return folder / "export"


def third_conv_weight(export_dir) -> str:
    from quantgate.int8.onnx_conversion import to_onnx

    to_onnx(export_dir / "model.pdmodel", export_dir / "model.pdiparams", export_dir.parent / "fp32.onnx")
    convs = [node for node in onnx.load(str(export_dir.parent / "fp32.onnx")).graph.node if node.op_type == "Conv"]
    return convs[2].input[1]


def run_search(broken_export, stage_dirs, out, cache=None, policy=STRICT, **search):
    config = QuantizeConfig(search={"recipes": RECIPES, "latency_repeats": 3, **search})
    out.mkdir()
    return search_quantization(config, policy, EVALUATE, broken_export, stage_dirs.data, out, cache)


@pytest.fixture(scope="module")
def searched(broken_export, stage_dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    cache = ContentCache(root / "store", "quantize-search")
    # recovery is off by default (docs/search.md): asked for here, so the search goes through every step
    first = run_search(broken_export, stage_dirs, root / "first", cache, recovery=True)
    again = run_search(broken_export, stage_dirs, root / "again", cache, recovery=True)
    return root, first, again


@needs_int8_dot_product
def test_plain_ptq_misses_and_the_search_falls_back_the_broken_layer(searched, broken_export):
    root, result, _ = searched
    record = json.loads((root / "first" / SEARCH_FILE).read_text())
    trials = record["trials_detail"]
    # Trial 1 is plain PTQ, trial 2 another calibration: on this model both miss the policy, by far.
    assert [trial["phase"] for trial in trials[:2]] == ["recipe", "recipe"]
    assert [trial["recipe"]["algo"] for trial in trials[:2]] == ["hist", "mse"]
    for trial in trials[:2]:
        assert trial["float_layers"] == [] and not trial["passed"]
        assert trial["validation"]["accuracy_drop_pts"] > 5
        assert any("accuracy_drop_pts" in failure for failure in trial["failures"])
    # Recovery comes next: the closer recipe again with AdaRound, every layer in INT8. No rounding of the
    # same grids fixes a weight scale set by the outlier, so it misses too, and the search goes on.
    recovery = trials[2]
    # the search recorded which recipe it found closer, and on what evidence (McNemar, then the outputs' distance)
    [base] = [decision for decision in record["decisions"] if decision["purpose"] == "recovery base"]
    assert base["trials"] == [1, 2] and base["p_value"] is not None and base["reason"]
    closer = trials[base["winner"] - 1]
    assert recovery["phase"] == "recovery" and recovery["float_layers"] == [] and not recovery["passed"]
    assert recovery["recipe"] == {**closer["recipe"], "rounding": "adaptive"}
    assert [step["phase"] for step in record["steps"]][:3] == ["recipe", "recovery", "fall-back"]
    assert record["steps"][1]["trials"] == 1 and record["steps"][1]["seconds"] == recovery["seconds"]
    # The ranking puts the layer reading the outlier channel first; falling it back passes.
    assert record["ranking"][0]["layer"] == third_conv_weight(broken_export)
    assert record["passed"] and result.metrics["search"]["passed"]
    kept = trials[record["kept_trial"] - 1]
    assert kept["passed"] and third_conv_weight(broken_export) in kept["float_layers"]
    assert kept["validation"]["accuracy_drop_pts"] <= STRICT.max_accuracy_drop
    assert len(kept["float_layers"]) < 3  # still an INT8 model
    # Each FP32 layer's cost in speed was measured against the trial that had it in INT8.
    assert [cost["layer"] for cost in record["float_layer_costs"]] == kept["float_layers"]
    assert all(cost["latency_cost_pct_of_fp32"] is not None for cost in record["float_layer_costs"])
    # The trade-off: every trial on the frontier, the kept one marked, and what the policy cost in FP32 layers.
    frontier = record[FRONTIER]
    assert [entry["index"] for entry in frontier if not entry["final"]] == [trial["index"] for trial in trials]
    assert [entry["index"] for entry in frontier if entry["kept"]] == [record["kept_trial"]]
    assert any(entry["pareto"] for entry in frontier) and record[POLICY_MAX_DROP] == 1.0
    assert record[POLICY_COST].startswith("within 1 pt: layer") and "in FP32" in record[POLICY_COST]
    assert result.metrics["search"][POLICY_COST] == record[POLICY_COST]
    # The kept PaddleSlim model is the stage's output.
    assert (root / "first" / "model.pdmodel").stat().st_size > 0
    assert result.metrics["search"]["float_layers"] == kept["float_layers"]


def test_a_rerun_takes_calibrations_and_ranking_from_the_cache(searched):
    root, first, again = searched
    trials = json.loads((root / "first" / SEARCH_FILE).read_text())["trials_detail"]
    # First run: each recipe calibrates afresh; a one-layer fall-back of a nearest-rounding base finds the ranking's
    # calibration ready (an AdaRound base is ranked on its nearest-rounding twin, so its trials calibrate afresh).
    assert [trial["calibration_cached"] for trial in trials if trial["phase"] == "recipe"] == [False, False]
    assert all(trial["calibration_cached"] for trial in trials
               if len(trial["float_layers"]) == 1 and trial["recipe"]["rounding"] == "nearest")
    assert not first.metrics["search"]["ranking_from_cache"]
    assert again.metrics["search"]["calibrations_from_cache"] == again.metrics["search"]["trials"]
    assert again.metrics["search"]["ranking_from_cache"]
    assert again.metrics["search"]["float_layers"] == first.metrics["search"]["float_layers"]
    assert (root / "again" / "model.pdiparams").read_bytes() == (root / "first" / "model.pdiparams").read_bytes()


def test_the_fall_backs_float_weights_come_from_an_abs_max_calibration_that_reuses_the_statistics(searched):
    root, _, _ = searched
    records = [json.loads(path.read_text()) for path in (root / "store").rglob("calibration.json")]
    float_models = [record for record in records if record.get("algo") == "abs_max"]
    # whatever the base recipe, the model with every layer skipped is calibrated once, by the cheapest algorithm
    assert len(float_models) == 1 and float_models[0]["calibration_statistics_reused"]
    assert {record["algo"] for record in records} == {"hist", "mse", "abs_max"}


def test_a_search_that_finds_nothing_keeps_the_best_trial_and_the_gate_fails_it(broken_export, stage_dirs, tmp_path):
    impossible = GatePolicy(max_accuracy_drop=0.0, min_agreement=1.0, min_int8_accuracy=100.0, min_speedup=0.0)
    result = run_search(broken_export, stage_dirs, tmp_path / "out", policy=impossible, max_trials=2)
    search = result.metrics["search"]
    assert not search["passed"] and search["trials"] == 2 and "max_trials" in search["stopped"]
    record = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())
    drops = [trial["validation"]["accuracy_drop_pts"] for trial in record["trials_detail"]]
    assert search["validation"]["accuracy_drop_pts"] == min(drops)  # the closest to FP32 is kept
    # Even a test split that meets every other criterion cannot release a search that found nothing.
    perfect = {"fp32_top1_pct": 99.0, "int8_top1_pct": 99.0, "agreement": 1.0, "speedup_int8_vs_fp32": 2.0}
    decision = decide(GatePolicy(), perfect, search=search)
    assert not decision.passed and [c.name for c in decision.failed] == ["search_validation"]
    assert decide(GatePolicy(), perfect, search={**search, "passed": True}).passed



def test_a_recipe_that_changes_only_hist_percent_reuses_the_first_calibrations_statistics(broken_export, stage_dirs,
                                                                                          tmp_path):
    result = run_search(broken_export, stage_dirs, tmp_path / "out", recipes=[{}, {"hist_percent": 0.999}],
                        max_float_layers=0, recovery=False, trial_calibration_samples=None)  # the kept trial's model is written
    trials = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())["trials_detail"]
    assert [trial["recipe"]["hist_percent"] for trial in trials] == [0.9999, 0.999]
    assert [trial["statistics_reused"] for trial in trials] == [False, True]
    assert not any(trial["calibration_cached"] for trial in trials)  # two calibrations, one set of forward passes
    # one pass per batch: 'hist' bins in the pass that measures the ranges (calibration_histogram one_pass)
    assert result.metrics["calibration_histogram"] == "one_pass"
    assert result.metrics["calibration_forward_batches"] == (0 if result.metrics["search"]["kept_trial"] == 2 else
                                                              result.metrics["calibration_batches"])
