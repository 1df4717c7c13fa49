"""run_stage records the peak memory of a stage's process tree in its manifest; the budget stays out of reuse."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from prefect import flow

from quantgate.artifacts import open_store
from quantgate.flows.publishing import memory_of
from quantgate.flows.stage_runs import run_stage
from quantgate.memory import BUDGET_KEY, MEMORY_ENV, PEAK_KEY

HELD = 300_000_000  # bytes the stage's child process holds: the peak must see them, though the parent never does
HOLDER = f"import time, numpy as np; block = np.ones({HELD} // 8); time.sleep(0.5)"


@dataclass(frozen=True)
class Held:
    metrics: dict


def hold_memory_in_a_child(_inputs: dict, folder: Path) -> Held:
    subprocess.run([sys.executable, "-c", HOLDER], check=True)
    (folder / "held.txt").write_text("held\n")
    return Held({"held_bytes": HELD})




def test_the_manifest_records_the_peak_of_the_stage_s_children_and_the_budget_stays_out_of_reuse(tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "7")
    store_root = str(tmp_path / "store")
    open_store(store_root)
    computed_ref, reused_ref = None, None

    @flow(name="stage-memory-budgets")
    def two_budgets() -> tuple:
        nonlocal computed_ref, reused_ref
        store = open_store(store_root)
        computed_ref = run_stage(store_root, store.create_version("toy"), "data", {"held": "300 MB"}, {},
                                 hold_memory_in_a_child)
        monkeypatch.setenv(MEMORY_ENV, "3")  # another machine's budget: the same result, so reused
        reused_ref = run_stage(store_root, store.create_version("toy"), "data", {"held": "300 MB"}, {},
                               hold_memory_in_a_child)

    two_budgets()
    store = open_store(store_root)
    computed, reused = store.read_manifest(computed_ref), store.read_manifest(reused_ref)
    assert computed["metrics"][PEAK_KEY] >= 0.9 * HELD / 1e9  # the child's memory, not only this process's
    assert computed["metrics"][BUDGET_KEY] == {"budget_gb": 7.0, "budget_source": f"{MEMORY_ENV}=7"}
    assert computed["reused_from"] is None
    assert reused["reused_from"]["version"] == "v1"  # the budget changed, the digest did not
    assert reused["metrics"] == computed["metrics"]  # the peak of the run that computed it, said so by reused_from
    memory = memory_of({"data": reused})
    assert memory["stages"]["data"]["reused_from"] == "v1" and memory["budget"] is None  # nothing measured here
