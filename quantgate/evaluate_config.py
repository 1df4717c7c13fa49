"""The `evaluate` section of the configuration, and the latency batch each task times at when it names none.
Re-exported by `quantgate.config`, the one schema (a PipelineConfig puts its task's latency batch in)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from quantgate.config_base import Section

# evaluate.latency_batch_size left unset: LATENCY_BATCH, or the task's own with why (a detector runs a page at a
# time in the OCR system: 16 pages at once would be timed, and sized, for a use nobody has).
LATENCY_BATCH = 16
TASK_LATENCY_BATCHES = {"text_detection": (1, "a page at a time, as the OCR system runs the detector")}


def task_latency_batch(task: str) -> int:
    """The latency batch of `task` when evaluate.latency_batch_size is unset."""
    return TASK_LATENCY_BATCHES.get(task, (LATENCY_BATCH, ""))[0]


def latency_batch_origin(task: str, batch: int) -> str | None:
    """Where a latency batch the task names itself comes from, for the records ("latency batch 1: text_detection's
    default (a page at a time, ...)"); None for any other batch (the usual 16 goes unsaid)."""
    default, why = TASK_LATENCY_BATCHES.get(task, (None, ""))
    return f"latency batch {batch}: {task}'s default ({why})" if batch == default else None


class EvaluateConfig(Section):
    runtimes: tuple[str, ...] = Field(
        ("onnxruntime",), min_length=1,
        description="Runtimes to evaluate and gate FP32 vs INT8 in (onnxruntime, openvino: pip install -e "
        "'.[openvino]', paddle_inference: oneDNN); the top-level metrics are onnxruntime's when listed, else the first's.",
    )
    batch_size: int | None = Field(
        None, ge=1, description="Samples per runtime call in the accuracy pass; null: the largest batch (up to 64) "
        "that fits the memory budget (QUANTGATE_MEMORY_GB). A batch set here is kept when it fits, else lowered "
        "with the reason in the manifest; predictions do not depend on it.",
    )
    latency_batch_size: int | None = Field(
        None, ge=1, le=4096, description="The batch latency is timed at (besides batch 1), whatever the memory "
        "budget, so speed-ups compare across machines; refused before the run if it does not fit. null: the task's "
        "default (16; 1 for text_detection: a page at a time, as the OCR system runs the detector).",
    )
    threads: int = Field(
        2, ge=1, le=256, description="Threads of every runtime (onnxruntime intra-op, OpenVINO inference, Paddle "
        "Inference CPU math), fixed so latencies compare.",
    )
    latency_repeats: int = Field(100, ge=3, le=10_000, description="Timed runs per model, in a process of their own; the median is reported.")

    @model_validator(mode="after")
    def _latency_batch_left_to_the_task(self) -> EvaluateConfig:
        # Unset (or null) on its own, it is the batch of the tasks that name none; a PipelineConfig then puts its
        # task's in (`_latency_batch_is_the_tasks`). It stays "unset" either way: the example prints it as null.
        if self.latency_batch_size is None:
            object.__setattr__(self, "latency_batch_size", LATENCY_BATCH)
            self.model_fields_set.discard("latency_batch_size")
        return self

    @field_validator("runtimes")
    @classmethod
    def _known_and_listed_once(cls, runtimes: tuple[str, ...]) -> tuple[str, ...]:
        known = ("onnxruntime", "openvino", "paddle_inference")  # stages/evaluate/outputs.py RUNTIME_NAMES
        unknown = [name for name in runtimes if name not in known]
        if unknown:
            raise ValueError(f"unknown runtime(s) {', '.join(map(repr, unknown))}; choose from {', '.join(known)}")
        repeated = sorted({name for name in runtimes if runtimes.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once; name each runtime once")
        return runtimes
