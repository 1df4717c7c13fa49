"""The search's trade-off: every candidate's drop against its speed-up in search.json with the Pareto-optimal ones
marked, the sentence that says what the policy cost (in the summary and in `quantgate run`'s summary), and the
report's picture of it.

The frontier and the sentence are quantgate's own arithmetic over trials, so scripted trials stand in for PaddleSlim
here; a real search on the digits CNN records them too (test_quantize_search.py).
"""

import json
import struct
from pathlib import Path
from types import SimpleNamespace

from quantgate.cli.run import search_lines
from quantgate.config import GatePolicy, QuantizeConfig
from quantgate.stages.quantize.outputs import (
    DECISIONS,
    FRONTIER,
    POLICY_COST,
    POLICY_MAX_DROP,
    POLICY_MIN_AGREEMENT,
    SEARCH,
    SEARCH_FILE,
)
from quantgate.stages.quantize.search_record import (
    FinalCalibration,
    SearchOutcome,
    search_summary,
    write_search_record,
)
from quantgate.stages.quantize.trade_off import pareto_flags, policy_cost
from quantgate.stages.quantize.trials import Trial
from quantgate.stages.report.markdown import render_markdown
from quantgate.stages.report.outputs import TRADE_OFF_PLOT
from quantgate.stages.report.trade_off import trade_off_plot

POLICY = GatePolicy(max_accuracy_drop=0.5, min_agreement=0.98, min_speedup=0.0)


def trial(index, phase, float_layers, drop, speedup, passed, algo="hist", **measured) -> Trial:
    """A judged trial as the runner records it; `measured`: fields a trial gains later (speedup_batch1, ...)."""
    given = {"index": index, "phase": phase, "recipe": {"algo": algo, "rounding": "nearest"},
             "float_layers": float_layers, "passed": passed,
             "validation": {"accuracy_drop_pts": drop, "agreement": 1 - drop / 100, "logit_error": drop,
                            "fp32_top1_pct": 95.0, "int8_top1_pct": 95.0 - drop, "validation_samples": 400},
             "failures": [] if passed else [f"accuracy_drop_pts = {drop} pts FAILED"],
             "latency_ms_p50_fp32": 10.0, "latency_ms_p50_int8": 10.0 / speedup, "speedup_int8_vs_fp32": speedup,
             "seconds": 20.0, "calibration_cached": False, "calibration_digest": "", "calibration_samples": 64,
             "calibration_s": 5.0, "statistics_reused": False, "folder": Path("."), "paddle2onnx_file": Path(".")}
    return Trial(**given, **measured)


def scripted_search() -> list[Trial]:
    """Recipes that miss, a recovery that misses, then fall-backs: 2, 3, 4, 5 are on the front, 1 and 6 are not."""
    return [
        trial(1, "recipe", [], 2.0, 2.20, False, speedup_batch1=1.9, latency_batch_size=32),
        trial(2, "recipe", [], 1.5, 2.25, False, algo="mse"),  # beats 1 on both
        trial(3, "recovery", [], 1.2, 2.10, False, algo="mse"),
        trial(4, "fall-back", ["conv_a", "conv_b"], 0.2, 1.50, True, algo="mse"),
        trial(5, "restore", ["conv_b"], 0.4, 1.80, True, algo="mse"),  # kept: fewest FP32 layers
        trial(6, "restore", ["conv_a"], 0.9, 1.70, False, algo="mse"),  # 5 beats it on both
    ]


def test_pareto_flags_mark_the_points_no_other_beats_on_drop_and_speed():
    assert pareto_flags([(2.0, 2.2), (1.5, 2.25), (0.2, 1.5), (0.9, 1.7), (0.4, 1.8), (None, 3.0)]) == \
        [False, True, True, False, True, False]
    assert pareto_flags([(1.0, 2.0), (1.0, 2.0)]) == [True, True]  # equal points do not beat each other
    assert pareto_flags([(0.5, 1.2), (0.5, 1.4), (0.25, 1.2)]) == [False, True, True]  # a tie on one axis


def test_search_json_holds_the_frontier_the_kept_trial_the_thresholds_and_the_decisions(tmp_path):
    trials = scripted_search()
    kept = trials[4]
    final = trial(7, "final", ["conv_b"], 0.3, 1.75, True, algo="mse")
    runner = SimpleNamespace(trials=trials, policy=POLICY, failed_recipes=[], elapsed_s=lambda: 120.0,
                             decisions=[{"between": [4, 5], "p_value": 0.5, "decided": "fewer FP32 layers"}])
    written = FinalCalibration(final, final, "the full-set calibration passes the policy and is written")
    outcome = SearchOutcome("passed with FP32 fall-backs")
    summary = search_summary(QuantizeConfig(), runner, kept, outcome, written)
    write_search_record(tmp_path, summary, POLICY, outcome, trials, written)
    record = json.loads((tmp_path / SEARCH_FILE).read_text())

    assert record["kept_trial"] == 5 and record[POLICY_MAX_DROP] == 0.5 and record[POLICY_MIN_AGREEMENT] == 0.98
    frontier = record[FRONTIER]
    assert [entry["index"] for entry in frontier] == [1, 2, 3, 4, 5, 6, 7]
    assert [entry["index"] for entry in frontier if entry["pareto"]] == [2, 3, 4, 5, 7]
    assert [entry["index"] for entry in frontier if entry["kept"]] == [5]
    assert [entry["index"] for entry in frontier if entry["final"]] == [7] and frontier[-1]["phase"] == "final"
    fifth = frontier[4]
    assert fifth["float_layer_count"] == 1 and fifth["float_layers"] == ["conv_b"] and fifth["algo"] == "mse"
    assert fifth["accuracy_drop_pts"] == 0.4 and fifth["speedup_int8_vs_fp32"] == 1.8 and fifth["passed"]
    # What a trial did not measure is recorded as None; what it did, as measured.
    assert fifth["speedup_batch1"] is None and fifth["latency_batch_size"] is None
    assert fifth["accuracy_drop_ci95_pts"] is None
    assert frontier[0]["speedup_batch1"] == 1.9 and frontier[0]["latency_batch_size"] == 32
    assert record[DECISIONS] == runner.decisions
    assert record[POLICY_COST] == "within 0.5 pt: layer conv_b in FP32, 1.75x instead of 2.25x"


def test_the_drop_interval_is_the_paired_one_else_from_int8s_interval(tmp_path):
    trials = scripted_search()
    trials[0].validation.update(int8_top1_ci95_pct=[92.0, 94.5], accuracy_drop_ci95_pts=[1.0, 2.75])
    trials[1].validation["int8_top1_ci95_pct"] = [92.0, 94.5]  # FP32's 95 % taken as measured
    runner = SimpleNamespace(trials=trials, policy=POLICY, failed_recipes=[], elapsed_s=lambda: 1.0,
                             decisions=[])
    summary = search_summary(QuantizeConfig(), runner, trials[4], SearchOutcome("passed"))
    assert [entry["accuracy_drop_ci95_pts"] for entry in summary[FRONTIER][:3]] == [[1.0, 2.75], [0.5, 3.0], None]
    assert summary[DECISIONS] == []  # no decision made, none recorded


def test_the_policy_cost_says_the_fp32_layers_and_the_speed_they_cost():
    trials = scripted_search()
    assert policy_cost(POLICY, trials, trials[4]) == "within 0.5 pt: layer conv_b in FP32, 1.80x instead of 2.25x"
    assert policy_cost(POLICY, trials, trials[3]) == \
        "within 0.5 pt: layers conv_a, conv_b in FP32, 1.50x instead of 2.25x"


def test_the_policy_cost_of_a_pass_with_every_layer_in_int8_is_none():
    trials = [trial(1, "recipe", [], 1.5, 2.2, False), trial(2, "recipe", [], 0.3, 2.18, True, algo="mse")]
    assert policy_cost(POLICY, trials, trials[1]) == "within 0.5 pt with every layer in INT8 at 2.18x"
    # The threshold is onnxruntime's when the policy gives one per runtime.
    by_runtime = GatePolicy(max_accuracy_drop={"onnxruntime": 0.4, "openvino": 1.0})
    assert policy_cost(by_runtime, trials, trials[1]).startswith("within 0.4 pt with every layer")


def test_when_nothing_passes_the_policy_cost_gives_the_closest_candidate():
    trials = [trial(1, "recipe", [], 1.5, 2.2, False), trial(2, "recipe", [], 0.8, 2.1, False, algo="mse")]
    assert policy_cost(POLICY, trials, trials[1]) == "no candidate within 0.5 pt; the closest -0.8 pt at 2.10x"
    # Close enough in accuracy but failed on another criterion: the sentence does not claim the drop missed.
    near = trial(3, "recipe", [], 0.25, 2.1, False, algo="avg")
    near.failures = ["agreement = 0.97 fraction (must be >= 0.98) FAILED"]
    assert policy_cost(POLICY, [*trials, near], near) == (
        "no candidate passed the policy; the closest -0.25 pt at 2.10x missed: "
        "agreement = 0.97 fraction (must be >= 0.98) FAILED")


def test_quantgate_runs_summary_says_what_the_policy_cost():
    trials = scripted_search()
    runner = SimpleNamespace(trials=trials, policy=POLICY, failed_recipes=[], elapsed_s=lambda: 1.0,
                             decisions=[])
    summary = search_summary(QuantizeConfig(), runner, trials[4], SearchOutcome("passed with FP32 fall-backs"))
    lines = search_lines({SEARCH: summary})
    assert lines[-1] == "  trade-off within 0.5 pt: layer conv_b in FP32, 1.80x instead of 2.25x"
    assert search_lines({SEARCH: {**summary, POLICY_COST: None}})[-1].startswith("  search    passed")


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_report_draws_the_trade_off_with_the_policy_line_and_says_its_cost(tmp_path):
    trials = scripted_search()
    runner = SimpleNamespace(trials=trials, policy=POLICY, failed_recipes=[], elapsed_s=lambda: 1.0,
                             decisions=[])
    summary = search_summary(QuantizeConfig(), runner, trials[4], SearchOutcome("passed with FP32 fall-backs"))
    drawn, without_policy = tmp_path / TRADE_OFF_PLOT, tmp_path / "no_policy.png"
    trade_off_plot(summary, drawn, "digits-cnn v1: INT8 search")
    trade_off_plot({**summary, POLICY_MAX_DROP: None}, without_policy, "digits-cnn v1: INT8 search")
    assert drawn.stat().st_size > 10_000 and png_size(drawn)[0] > 600
    assert drawn.read_bytes() != without_policy.read_bytes()  # the policy's line is drawn

    text = render_markdown("digits-cnn v1", {}, {}, {}, {}, search=summary)
    assert f"]({TRADE_OFF_PLOT})" in text
    assert "What the policy cost: within 0.5 pt: layer conv_b in FP32, 1.80x instead of 2.25x." in text
    # Without a search (strategy 'single'), or a summary from before the frontier: no picture, no sentence.
    assert TRADE_OFF_PLOT not in render_markdown("digits-cnn v1", {}, {}, {}, {}, search=None)
    older = {key: value for key, value in summary.items() if key not in (FRONTIER, POLICY_COST)}
    assert TRADE_OFF_PLOT not in render_markdown("digits-cnn v1", {}, {}, {}, {}, search=older)
