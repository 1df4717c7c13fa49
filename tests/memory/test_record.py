"""What the version record, the run summary and the report say about memory: this run's peaks, reused ones named."""

from __future__ import annotations

import json
from types import SimpleNamespace

from quantgate.cli.run import summary_lines
from quantgate.memory import BATCHES_KEY, BUDGET_KEY, PEAK_KEY
from quantgate.memory.record import MEMORY, markdown_lines, memory_record
from quantgate.memory.record import summary_lines as memory_summary

BUDGET = {"budget_gb": 9.6, "budget_source": "30 % of the machine memory 32.0 GB"}
LOWERED = {"batch_size": 8, "requested": 32, "ceiling": 64, "reason": "quantize.batch_size=32 lowered to 8: over budget"}
CHOSEN = {"batch_size": 16, "requested": None, "ceiling": 16, "reason": "the largest batch up to 16 that fits"}


def stages() -> dict:
    """{stage: (metrics, reused_from)}: train reused from v1 with the largest peak, quantize lowered a batch."""
    return {
        "data": ({PEAK_KEY: 0.4, BUDGET_KEY: BUDGET, "fingerprint": "x"}, None),
        "train": ({PEAK_KEY: 5.5, BUDGET_KEY: {"budget_gb": 50.0, "budget_source": "elsewhere"},
                   BATCHES_KEY: {"training": CHOSEN}}, "v1"),
        "quantize": ({PEAK_KEY: 2.25, BUDGET_KEY: BUDGET, BATCHES_KEY: {"calibration": LOWERED}}, None),
        "evaluate": ({PEAK_KEY: 1.0, BUDGET_KEY: BUDGET, BATCHES_KEY: {"evaluate": CHOSEN}}, None),
        "export": ({"from_before_peaks": True}, None),
    }


def test_the_largest_peak_is_this_run_s_and_a_lowered_batch_says_from_what():
    lines = memory_summary(memory_record(stages()))
    assert lines[0].startswith("  memory    peak 2.25 GB in quantize") and "budget 9.60 GB (30 % of" in lines[0]
    assert lines[1] == "  batches   calibration 8 (lowered from 32), evaluate 16"  # not train's: reused


def test_the_record_keeps_reuse_and_is_canonical_json():
    record = memory_record(stages())
    assert record["stages"]["train"]["reused_from"] == "v1" and "export" not in record["stages"]
    assert record["budget"] == BUDGET  # the budget of the stages computed in this run, not the reused one's
    assert json.loads(json.dumps(record, sort_keys=True)) == record


def test_the_batches_follow_the_pipeline_though_a_stored_record_sorts_its_stages():
    stored = json.loads(json.dumps(memory_record(stages()), sort_keys=True))  # evaluate before quantize
    assert memory_summary(stored, ("quantize", "evaluate"))[1] == (
        "  batches   calibration 8 (lowered from 32), evaluate 16")


def test_a_run_that_reused_every_stage_claims_no_peak():
    record = memory_record({"train": ({PEAK_KEY: 5.5, BUDGET_KEY: BUDGET}, "v1")})
    assert memory_summary(record) == ["  memory    every stage reused: nothing measured in this run; no budget recorded"]


def test_the_report_lists_each_stage_s_peak_and_batches_with_why():
    text = "\n".join(markdown_lines(memory_record(stages())))
    assert "## Memory" in text
    assert "| quantize | 2.250 | calibration 8 (lowered from 32) | quantize.batch_size=32 lowered to 8: over budget |" in text
    assert "| train | 5.500 (reused from v1) | training 16 |" in text
    assert "| data | 0.400 |  |  |" in text


def test_the_run_summary_prints_the_memory_line():
    record = {"status": "passed", MEMORY: memory_record(stages())}
    info = SimpleNamespace(model="digits", version="v2", record=record, aliases=["latest"])
    printed = "\n".join(summary_lines(info, "/store/digits/v2", 1.0))
    assert "memory    peak 2.25 GB in quantize" in printed and "calibration 8 (lowered from 32)" in printed


def test_records_from_before_peaks_show_nothing():
    assert memory_summary(None) == [] and markdown_lines(None) == []
    assert markdown_lines(memory_record({"data": ({"fingerprint": "x"}, None)})) == []


def test_a_latency_batch_that_is_the_task_s_default_says_so_once():
    from quantgate.config import latency_batch_origin

    origin = latency_batch_origin("text_detection", 1)
    assert origin == "latency batch 1: text_detection's default (a page at a time, as the OCR system runs the detector)"
    assert latency_batch_origin("text_detection", 16) is None and latency_batch_origin("classification", 16) is None
    page = {"batch_size": 1, "requested": 1, "ceiling": 1, "reason": "evaluate.latency_batch_size=1 fits the budget",
            "origin": origin}
    evaluate = {PEAK_KEY: 1.0, BUDGET_KEY: BUDGET, BATCHES_KEY: {
        "evaluate accuracy pass": CHOSEN, "evaluate latency in onnxruntime": page, "evaluate latency in openvino": page}}
    record = memory_record({"evaluate": (evaluate, None)})
    assert memory_summary(record)[1] == (
        "  batches   evaluate accuracy pass 16, evaluate latency in onnxruntime 1, evaluate latency in openvino 1; "
        f"{origin}")
    assert (f"| evaluate | 1.000 | evaluate latency in openvino 1 | evaluate.latency_batch_size=1 fits the budget; "
            f"{origin} |") in markdown_lines(record)
