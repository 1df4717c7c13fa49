"""The budget and the batch chosen to fit it: what the user set is kept when it fits, lowered with a reason when it
does not, and a budget below one sample is refused with the settings that change it."""

from __future__ import annotations

import pytest

from quantgate.errors import EXIT_BAD_INPUT
from quantgate.memory import (
    MEMORY_ENV,
    MemoryBudget,
    MemoryRefused,
    choose_batch,
    choose_batch_in_passes,
    memory_budget,
    tree_memory_bytes,
)
from quantgate.memory.budget import BadMemoryBudget, machine_memory

GB = 10**9
BUDGET = MemoryBudget(4 * GB, "QUANTGATE_MEMORY_GB=4")


def chosen(requested: int | None, per_sample: float, fixed: float = 1 * GB, ceiling: int = 32):
    return choose_batch("calibration", fixed_bytes=int(fixed), per_sample_bytes=int(per_sample), budget=BUDGET,
                        requested=requested, ceiling=ceiling, setting="quantize.batch_size", subject="det 3x960x960")


def test_unset_batch_is_the_largest_that_fits_up_to_the_ceiling():
    assert chosen(None, 0.001 * GB).batch_size == 32  # small samples: the ceiling
    roomy = chosen(None, 0.25 * GB)  # (4 - 1) / 0.25 = 12
    assert roomy.batch_size == 12 and roomy.requested is None and not roomy.lowered
    assert roomy.estimated_bytes <= BUDGET.bytes < roomy.fixed_bytes + 13 * roomy.per_sample_bytes


def test_a_set_batch_that_fits_is_kept_as_given():
    kept = chosen(8, 0.25 * GB)
    assert (kept.batch_size, kept.requested, kept.lowered) == (8, 8, False)
    assert kept.reason == "quantize.batch_size=8 fits the budget"


def test_a_set_batch_that_does_not_fit_is_lowered_with_the_reason_recorded():
    lowered = chosen(32, 0.25 * GB)
    assert (lowered.batch_size, lowered.requested, lowered.lowered) == (12, 32, True)
    record = lowered.record()
    assert record["batch_size"] == 12 and record["requested"] == 32 and record["budget_gb"] == 4.0
    assert "quantize.batch_size=32 lowered to 12" in record["reason"] and "QUANTGATE_MEMORY_GB=4" in record["reason"]


def test_a_budget_below_one_sample_is_refused_naming_the_budget_the_sample_and_the_settings():
    with pytest.raises(MemoryRefused) as refused:
        chosen(None, 3.5 * GB)
    message = str(refused.value)
    assert refused.value.exit_code == EXIT_BAD_INPUT
    for part in ("det 3x960x960", "4.50 GB at batch 1", "3.50 GB per sample", "4.00 GB", "QUANTGATE_MEMORY_GB=4",
                 "--memory-gb", "data.transforms", "nothing was run"):
        assert part in message


def in_passes(per_sample: float, kept: float, fixed: float = 1 * GB, requested: int | None = None):
    return choose_batch_in_passes("calibration", fixed_bytes=int(fixed), per_sample_bytes=int(per_sample),
                                  split_bytes=int(kept), max_passes=4, budget=BUDGET, requested=requested,
                                  ceiling=32, setting="quantize.batch_size", subject="det 3x960x960",
                                  what_splits="the activations calibration keeps")


def test_a_loop_that_fits_in_one_pass_takes_one_whatever_could_be_split():
    one = in_passes(0.25 * GB, 0.2 * GB)
    assert (one.batch_size, one.passes, one.record()["passes"]) == (12, 1, 1)
    assert one == chosen(None, 0.25 * GB)


def test_a_sample_too_large_for_one_pass_is_split_over_the_fewest_passes_that_fit():
    # one pass: 1 + 3.5 GB; the 3 GB kept in two shares: 1 + 0.5 + 1.5 = 3 GB fits the 4 GB budget
    split = in_passes(3.5 * GB, 3 * GB)
    assert (split.batch_size, split.passes) == (1, 2)
    assert split.estimated_bytes <= BUDGET.bytes and split.per_sample_bytes == 2 * GB
    assert "split over 2 passes" in split.reason and "4.50 GB in one pass" in split.reason
    assert in_passes(3.5 * GB, 3 * GB, fixed=2.5 * GB).passes == 3  # 2.5 + 0.5 + 1 GB
    assert in_passes(3.5 * GB, 3 * GB, requested=8).batch_size == 1  # a set batch is lowered, passes as needed


def test_a_sample_too_large_for_the_most_passes_is_refused_saying_what_they_would_need():
    with pytest.raises(MemoryRefused) as refused:
        in_passes(3.5 * GB, 0.4 * GB)  # 1 + 3.1 + 0.1 GB
    message = str(refused.value)
    for part in ("4.50 GB at batch 1", "in 4 passes over the data still 4.20 GB", "QUANTGATE_MEMORY_GB=4",
                 "nothing was run"):
        assert part in message, message


def test_the_budget_comes_from_the_setting_or_from_a_fraction_of_the_limit_never_from_free_memory():
    assert memory_budget({MEMORY_ENV: "2.5"}) == MemoryBudget(int(2.5 * GB), f"{MEMORY_ENV}=2.5")
    limit, what = machine_memory()
    default = memory_budget({})
    assert default.bytes == int(limit * 0.3) and what in default.source
    assert memory_budget({}) == default  # the same on every call: free memory does not enter


@pytest.mark.parametrize("value", ["0", "-1", "eight", "nan", "inf"])
def test_a_budget_that_is_not_a_positive_number_is_bad_input_naming_the_variable(value):
    with pytest.raises(BadMemoryBudget, match=f"{MEMORY_ENV}='{value}' is not a positive number of GB"):
        memory_budget({MEMORY_ENV: value})


def test_the_process_tree_counts_this_process():
    assert tree_memory_bytes() > 10 * 2**20
