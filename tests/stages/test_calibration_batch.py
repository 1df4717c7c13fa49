"""When the calibration batch chosen for the machine enters the quantize stage's reuse digest: only where the scales
can depend on it (a per-batch algorithm, or batch_nums counting batches) and it is not the batch asked for."""

from __future__ import annotations

import pytest

from quantgate.config import QuantizeConfig
from quantgate.memory import MemoryBudget, choose_batch
from quantgate.stages.quantize.memory_fit import batch_matters, calibration_environment

GB = 10**9


def chosen(config: QuantizeConfig, fits: int):
    """The batch `config` gets where `fits` samples fit (1 GB held, 0.1 GB a sample)."""
    budget = MemoryBudget(int((1 + 0.1 * fits + 0.05) * GB), "test")
    return choose_batch("calibration", fixed_bytes=GB, per_sample_bytes=GB // 10, budget=budget,
                        requested=config.batch_size, ceiling=32, setting="quantize.batch_size", subject="test")


@pytest.mark.parametrize(("settings", "matters"), [
    ({"strategy": "single", "algo": "hist"}, False),  # each sample's range: any batch gives the same scales
    ({"strategy": "single", "algo": "abs_max"}, False),
    ({"strategy": "single", "algo": "avg"}, True),  # a statistic per batch
    ({"strategy": "single", "algo": "hist", "batch_size": 32, "batch_nums": 2}, True),  # fewer samples at batch 8
    ({"strategy": "search"}, True),  # the default recipes include avg and mse
])
def test_a_lowered_batch_matters_only_where_the_scales_depend_on_it(settings, matters):
    config = QuantizeConfig(**settings)
    assert batch_matters(config, chosen(config, 8)) is matters
    assert batch_matters(config, chosen(config, 40)) is False  # the batch asked for (32 when unset) was kept


def test_a_batch_the_scales_cannot_depend_on_adds_nothing_and_reads_no_folder():
    def folders():
        raise AssertionError("the export and data folders were read for a batch that cannot matter")

    assert calibration_environment(QuantizeConfig(strategy="single", algo="hist"), folders) == {}
