"""A run's memory as its version record keeps it and as people read it: the summary's lines, the report's table.

Each stage's manifest holds its peak (`PEAK_KEY`), the budget it ran under (`BUDGET_KEY`) and the batches it chose
(`BATCHES_KEY`). A reused stage's manifest keeps the metrics of the run that computed it, so its entry says
`reused_from`: its numbers describe that earlier computation, and "the largest peak of this run" counts only the
stages computed in this run.
"""

from __future__ import annotations

from quantgate.memory.batches import BATCHES_KEY
from quantgate.memory.peak import BUDGET_KEY, PEAK_KEY

MEMORY = "memory"  # the version record's key: memory_record(...)
REUSED_FROM = "reused_from"


def memory_record(stages: dict[str, tuple[dict, str | None]]) -> dict:
    """The record's `memory` from {stage: (its metrics, the version it was reused from or None)}: each stage's
    peak, batches and reuse, in the order given, and the budget this run's stages ran under (None when every
    stage was reused). Stages committed before peaks were measured have no entry."""
    entries = {stage: {PEAK_KEY: metrics[PEAK_KEY], BATCHES_KEY: metrics.get(BATCHES_KEY) or {}, REUSED_FROM: reused}
               for stage, (metrics, reused) in stages.items() if PEAK_KEY in metrics}
    budgets = [metrics[BUDGET_KEY] for metrics, reused in stages.values() if reused is None and BUDGET_KEY in metrics]
    return {"budget": budgets[-1] if budgets else None, "stages": entries}


def batch_shown(loop: str, choice: dict) -> str:
    """"calibration 8 (lowered from 32)", or "evaluate 16" where the batch is the one asked for or chosen unasked."""
    requested = choice.get("requested")
    lowered = f" (lowered from {requested})" if requested and choice["batch_size"] < requested else ""
    return f"{loop} {choice['batch_size']}{lowered}"


def _budget_shown(budget: dict | None) -> str:
    return f"budget {budget['budget_gb']:.2f} GB ({budget['budget_source']})" if budget else "no budget recorded"


def summary_lines(memory: dict | None, order: tuple[str, ...] = ()) -> list[str]:
    """The terminal's lines: the largest peak of the stages computed in this run, and the budget; then the batches
    those stages chose, where they chose any, stages in `order` first (a stored record's keys are sorted). Nothing
    for a record from before peaks were measured."""
    if not memory:
        return []
    stages = memory["stages"]
    ranked = sorted(stages, key=lambda stage: order.index(stage) if stage in order else len(order))
    here = {stage: stages[stage] for stage in ranked if stages[stage][REUSED_FROM] is None}
    if here:
        largest = max(here, key=lambda stage: here[stage][PEAK_KEY])
        lines = [f"  memory    peak {here[largest][PEAK_KEY]:.2f} GB in {largest} (process tree); "
                 f"{_budget_shown(memory['budget'])}"]
    else:
        lines = [f"  memory    every stage reused: nothing measured in this run; {_budget_shown(memory['budget'])}"]
    choices = [(loop, choice) for entry in here.values() for loop, choice in entry[BATCHES_KEY].items()]
    origins = "".join(f"; {origin}" for origin in dict.fromkeys(choice.get("origin") for _, choice in choices)
                      if origin)  # said once, however many loops share it (each runtime's latency)
    return lines + ([f"  batches   {', '.join(batch_shown(*item) for item in choices)}{origins}"] if choices else [])


def _cell(text) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def markdown_lines(memory: dict | None) -> list[str]:
    """The report's section: each stage's peak and the batches it chose, with why."""
    if not memory or not memory["stages"]:
        return []
    lines = ["## Memory", "",
             f"Peak resident memory of each stage's process tree (the stage and every process it started), "
             f"{_budget_shown(memory['budget'])}. A reused stage's numbers were measured in the run that computed "
             "it.", "", "| stage | peak (GB) | batch | why |", "|---|---:|---|---|"]
    for stage, entry in memory["stages"].items():
        reused = f" (reused from {entry[REUSED_FROM]})" if entry[REUSED_FROM] else ""
        peak = f"{entry[PEAK_KEY]:.3f}{reused}"
        choices = entry[BATCHES_KEY].items() or [(None, None)]
        for loop, choice in choices:
            why = "; ".join(filter(None, (choice.get("reason"), choice.get("origin")))) if choice else ""
            batch, why = (batch_shown(loop, choice), _cell(why)) if choice else ("", "")
            lines.append(f"| {stage} | {peak} | {batch} | {why} |")
    return lines
