"""The evaluate stage's batches: the accuracy pass runs at the batch chosen (or set), its predictions do not depend
on it, and the latency batch stays what evaluate.latency_batch_size says whatever the budget and the accuracy batch
(the budget shrinking a real detector's batches: tests/integration/test_memory_budget.py)."""

from __future__ import annotations

import numpy as np

from quantgate.config import EvaluateConfig
from quantgate.memory import BATCHES_KEY, MEMORY_ENV, tree_memory_bytes
from quantgate.stages.evaluate.accuracy import evaluate
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE

ACCURACY, LATENCY = "evaluate accuracy pass", "evaluate latency in onnxruntime"


def evaluated(stage_dirs, out_dir, budget_gb: float | None, monkeypatch, batch_size: int | None = None) -> dict:
    if budget_gb is None:
        monkeypatch.delenv(MEMORY_ENV, raising=False)
    else:
        monkeypatch.setenv(MEMORY_ENV, f"{budget_gb:.4f}")
    out_dir.mkdir()
    config = EvaluateConfig(threads=1, latency_repeats=3, latency_batch_size=4, batch_size=batch_size)
    return evaluate(config, stage_dirs.convert / "fp32.onnx", stage_dirs.convert / "int8.onnx", stage_dirs.data,
                    out_dir).metrics


def test_the_accuracy_batch_changes_neither_the_predictions_nor_the_latency_batch(stage_dirs, tmp_path, monkeypatch):
    roomy = evaluated(stage_dirs, tmp_path / "roomy", None, monkeypatch)
    tight = evaluated(stage_dirs, tmp_path / "tight", (tree_memory_bytes() + 0.5e9) / 1e9, monkeypatch, batch_size=7)
    assert roomy[BATCHES_KEY][ACCURACY]["batch_size"] == 64 and roomy[BATCHES_KEY][ACCURACY]["requested"] is None
    assert (tight[BATCHES_KEY][ACCURACY]["batch_size"], tight[BATCHES_KEY][ACCURACY]["requested"]) == (7, 7)
    for metrics in (roomy, tight):
        assert metrics["latency_batch_size"] == 4 and metrics[BATCHES_KEY][LATENCY]["batch_size"] == 4
    with np.load(tmp_path / "roomy" / PREDICTIONS_FILE) as first, np.load(tmp_path / "tight" / PREDICTIONS_FILE) as second:
        for key in ("fp32_pred", "int8_pred", "fp32_logits", "int8_logits", "sample_ids"):
            assert np.array_equal(first[key], second[key]), key
    assert roomy["int8_top1_pct"] == tight["int8_top1_pct"] and roomy["agreement"] == tight["agreement"]
