"""The evaluate stage's batches: the accuracy pass's adapts to the memory budget, the latency batch does not.

The accuracy pass holds every runner open (FP32 and INT8 in each runtime) and feeds them one batch: its batch is
evaluate.batch_size when that fits the budget, else the largest that does (up to RUNNER_CEILING when unset).
Predictions do not depend on it. Latency is timed at evaluate.latency_batch_size and at 1 whatever the budget, so
the speed criterion means the same on every machine: a latency batch that does not fit is refused, not lowered.
"""

from __future__ import annotations

import dataclasses

from quantgate.config import EvaluateConfig, latency_batch_origin
from quantgate.memory import (
    LATENCY_SETTING,
    BatchChoice,
    latency_batch_kept,
    latency_loop,
    memory_budget,
)
from quantgate.runtimes.forms import ModelForm
from quantgate.runtimes.memory_fit import RUNNER_CEILING, runners_batch
from quantgate.samples.reading import StoredData

ACCURACY_LOOP = "evaluate accuracy pass"


def batch_choices(config: EvaluateConfig, forms: dict[str, dict[str, ModelForm]],
                  data: StoredData) -> dict[str, BatchChoice]:
    """{loop: its batch}: the accuracy pass over every runner, and each runtime's latency process.

    Raises:
        MemoryRefused: one sample of the accuracy pass, or evaluate.latency_batch_size in a runtime, does not fit.
        ProbeFailed: a process measuring a runner's memory failed.
    """
    budget, shape = memory_budget(), tuple(data.input_shape)
    runners = {(runtime, name): form for runtime, named in forms.items() for name, form in named.items()}
    subject = (f"{len(runners)} models ({', '.join(forms)}, FP32 and INT8) open at once on inputs of "
               f"{'x'.join(map(str, shape))}")
    choices = {ACCURACY_LOOP: runners_batch(
        ACCURACY_LOOP, runners, shape, config.threads, requested=config.batch_size, ceiling=RUNNER_CEILING,
        setting="evaluate.batch_size", subject=subject, budget=budget)}
    origin = latency_batch_origin(data.task.name, config.latency_batch_size)
    for runtime, named in forms.items():
        loop = latency_loop(runtime)
        latency = runners_batch(
            loop, {(runtime, name): form for name, form in named.items()}, shape, config.threads,
            requested=config.latency_batch_size, ceiling=config.latency_batch_size, setting=LATENCY_SETTING,
            subject=f"{runtime}'s {len(named)} models on {'x'.join(map(str, shape))}", budget=budget,
            own_process=True)
        # a speed measured at another batch would not compare with the policy's: refused, not lowered
        choices[loop] = dataclasses.replace(latency_batch_kept(latency), origin=origin)
    return choices
