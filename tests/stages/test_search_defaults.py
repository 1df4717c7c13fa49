"""The search as it runs by default, on the digits CNN plain PTQ provably breaks (test_quantize_search.py): no
AdaRound step unless asked for, and each trial says what it cost, what is left of the budget, how fast it is at
batch 1, and how the search chose between trials."""

from __future__ import annotations

import json
import logging
import re

from test_quantize_search import broken_export, run_search  # noqa: F401  (broken_export: a fixture)

from quantgate.config import QuantizeConfig
from quantgate.stages.quantize.outputs import SEARCH_FILE


def test_recovery_is_off_by_default_and_each_trial_reports_its_cost_and_batch_1_speed(
        broken_export, stage_dirs, tmp_path, caplog):  # noqa: F811
    assert QuantizeConfig().search.recovery is False  # AdaRound gained on one calibration split, lost on another
    with caplog.at_level(logging.INFO, logger="quantgate.stages.quantize.trials"):
        run_search(broken_export, stage_dirs, tmp_path / "out", max_float_layers=0, trial_calibration_samples=None)
    record = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())
    trials = record["trials_detail"]
    # both recipes miss; with the defaults the search goes on to no recovery step
    assert [trial["phase"] for trial in trials] == ["recipe", "recipe"]
    assert record["stopped"] == "no recipe passed, and quantize.search.max_float_layers is 0"
    for trial in trials:
        assert trial["latency_batch_size"] >= 1 and trial["latency_ms_p50_int8_batch1"] > 0
        assert trial["speedup_batch1"] == trial["latency_ms_p50_fp32_batch1"] / trial["latency_ms_p50_int8_batch1"]
        low, high = trial["validation"]["int8_top1_ci95_pct"]
        assert low <= trial["validation"]["int8_top1_pct"] <= high
        assert "outcomes" not in trial
    # the kept trial was chosen on evidence, and the choice is in search.json
    [kept] = [decision for decision in record["decisions"] if decision["purpose"] == "kept trial"]
    assert kept["trials"] == [1, 2] and kept["winner"] == record["kept_trial"] and kept["p_value"] is not None
    # the progress line: what the trial cost and what is left of the budget
    lines = [message for message in caplog.messages if message.startswith("search trial")]
    assert len(lines) == 2
    assert re.search(r"; trial [\d,]+ s; 2 of 12 trials, [\d,]+ s of 1,800 s left$", lines[1]), lines[1]
