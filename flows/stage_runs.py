"""How a flow runs a stage: reuse an identical earlier one, or verify its inputs, run it and commit it.

Stages are deterministic, so a retry would only repeat a failure: no retries; and no Prefect cache, because a
version is a fresh record of one run. Reuse across runs is keyed on content, in the store: a stage whose input
digest (config, code version, libraries, device, input contents) matches a committed stage of any earlier version
is committed from that stage's verified files instead of rerun. Every input is re-hashed by the store before a
stage reads it.

A computed stage's metrics get the peak resident memory of this process's tree while its work ran (`PEAK_KEY`,
see quantgate/memory/peak.py) and the memory budget it ran under (`BUDGET_KEY`). Both are metrics, never part of
the input digest: the budget decides batch sizes, not results, and a peak is an outcome. A reused stage ran
nothing in this run: its manifest keeps the metrics of the run that computed it, peak and budget included, under
`reused_from`, and the version's record and summary count its memory as that run's, not this one's
(quantgate/memory/record.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import paddle
from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE

from quantgate.artifacts import StageRef, VersionRef, open_store
from quantgate.artifacts.reuse import reuse_note
from quantgate.flows.code_version import code_digest
from quantgate.flows.stage_logs import library_output, stage_lines, stage_logs_to_prefect
from quantgate.memory import BUDGET_KEY, PEAK_KEY, PeakMemory, memory_budget, return_freed_memory

STAGE_TASK = {"retries": 0, "cache_policy": NO_CACHE}  # every stage task's decorator settings


def stage_environment(stage: str) -> dict:
    """What decides a stage's output besides its config and inputs: its code and the device it runs on."""
    return {"code_sha256": code_digest(stage), "device": paddle.device.get_device()}


def run_stage(
    store_root: str,
    version: VersionRef,
    stage: str,
    config: dict,
    inputs: dict[str, StageRef],
    work: Callable[[dict[str, Path], Path], object],
    reuse: bool = True,
    environment: dict | Callable[[], dict] | None = None,
    digest_config: dict | None = None,
) -> StageRef:
    """Reuse an earlier identical stage, or verify the inputs, run `work(input_dirs, out_dir)` in a
    staging folder and commit it; return the committed stage's ref.

    `environment` adds what else decides the output to the input digest (e.g. a resumed checkpoint); a
    callable is called once the stage's line is shown (e.g. scanning an image folder takes a while).
    `digest_config` is what of `config` goes into the digest when `config` records more (where the data
    stage read its files); the manifest records `config`.
    """
    store = open_store(store_root)
    with stage_lines(stage) as outcome:
        extra = environment() if callable(environment) else environment or {}
        digest = store.input_digest(stage, config if digest_config is None else digest_config, inputs,
                                    {**stage_environment(stage), **extra})
        source = store.find_reusable(version.model, stage, digest) if reuse else None
        if source is not None:
            ref = store.reuse_stage(version, stage, config, inputs, source, digest)
            outcome["note"] = reuse_note(source, digest)
            get_run_logger().info("%s: %s", stage, outcome["note"])
            return ref
        # Verified right before use: nothing pickle-based is loaded from bytes the manifest does not vouch for.
        input_dirs = {name: store.verify_stage(ref) for name, ref in inputs.items()}
        budget = memory_budget()
        with (stage_logs_to_prefect(), library_output(store, version, stage),
              store.write_stage(version, stage, config, inputs, input_digest=digest) as writer):
            with PeakMemory() as peak:
                result = work(input_dirs, writer.dir)
            return_freed_memory()  # what the stage freed is the next one's budget, not this process's heap
            writer.metrics.update(result.metrics)
            writer.metrics.update({PEAK_KEY: peak.gigabytes(), BUDGET_KEY: budget.record()})
    get_run_logger().info("%s: computed, committed %s (inputs digest %s…), peak resident memory %.3f GB", stage,
                          writer.ref.path, digest[:12], peak.gigabytes())
    return writer.ref
