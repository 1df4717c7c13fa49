"""The release flow with quantize.strategy 'search' (the default): the search's verdict and trials
travel into the version record, the gate and the report; a rerun under another policy takes its calibrations from the
store's cache."""

import json

from quantgate.artifacts import ArtifactStore
from quantgate.flows.release import release
from quantgate.stages.quantize.outputs import FRONTIER, POLICY_COST, SEARCH_FILE
from quantgate.stages.report.outputs import TRADE_OFF_PLOT


def test_a_searched_release_records_the_search_and_the_gate_checks_it(tmp_path, tiny_config):
    config = tiny_config(quantize={"strategy": "search", "search": {"latency_repeats": 3}})
    assert release(config=config, store=str(tmp_path)) == "v1"
    version_dir = tmp_path / "digits-cnn" / "versions" / "v1"
    search = json.loads((version_dir / "quantize" / SEARCH_FILE).read_text())
    assert search["passed"] and search["trials_detail"][0]["phase"] == "recipe"
    assert search["validation"]["validation_samples"] > 0  # judged on the validation split, not the test split

    record = json.loads((version_dir / "version.json").read_text())
    assert record["search"]["kept_trial"] == search["kept_trial"] and record["search"]["passed"]
    criteria = {c["name"]: c for c in json.loads((version_dir / "gate" / "gate.json").read_text())["criteria"]}
    assert criteria["search_validation"]["verdict"] == "pass"
    report = (version_dir / "report" / "report.md").read_text()
    assert "## INT8 recipe search (validation split)" in report
    # The trade-off the search measured: drawn, and what the policy cost said under it.
    assert search[FRONTIER] and f"]({TRADE_OFF_PLOT})" in report
    assert f"What the policy cost: {search[POLICY_COST]}" in report
    assert (version_dir / "report" / TRADE_OFF_PLOT).stat().st_size > 10_000

    # Another policy: training and export are reused, the search runs again (its verdict depends on the
    # policy), and PaddleSlim runs nothing new: every calibration comes from the store's cache.
    stricter = config.model_copy(update={"gate": config.gate.model_copy(update={"max_accuracy_drop": 0.9})})
    assert release(config=stricter, store=str(tmp_path)) == "v2"
    again = ArtifactStore(tmp_path).version_record(ArtifactStore(tmp_path).version("digits-cnn", "v2"))["search"]
    assert again["calibrations_from_cache"] == again["trials"] >= 1

    # --no-reuse touches no cache: the search calibrates afresh and adds nothing to the store's cache.
    cache_entries = sorted(path.name for path in (tmp_path / ".cache" / "quantize-search").iterdir())
    assert release(config=stricter, store=str(tmp_path), reuse=False) == "v3"
    fresh = ArtifactStore(tmp_path).version_record(ArtifactStore(tmp_path).version("digits-cnn", "v3"))["search"]
    assert fresh["calibrations_from_cache"] == 0 and not fresh["ranking_from_cache"]
    assert sorted(path.name for path in (tmp_path / ".cache" / "quantize-search").iterdir()) == cache_entries
