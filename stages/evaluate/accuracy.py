"""Evaluate stage: FP32 and INT8 side by side on the test split, in every runtime evaluate.runtimes lists."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.config import EvaluateConfig
from quantgate.errors import StageError
from quantgate.memory import BATCHES_KEY, return_freed_memory
from quantgate.progress import Progress
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import (
    Runner,
    RuntimeNotApplicable,
    check_runtimes,
    library,
    model_forms,
    not_applicable_runtimes,
    open_runner,
)
from quantgate.runtimes.latency import measure_forms
from quantgate.runtimes.ort_forms import onnxruntime_int8_form
from quantgate.samples.reading import StoredData, open_data
from quantgate.samples.sample_ids import sample_ids
from quantgate.stages.evaluate.float_layers import float_layers_record
from quantgate.stages.evaluate.memory_fit import ACCURACY_LOOP, batch_choices
from quantgate.stages.evaluate.outputs import (
    CHARACTER_ERRORS_FILE,
    INT8_FLOAT_LAYERS,
    ONNXRUNTIME,
    OPENVINO,
    PADDLE_INFERENCE,
    PADDLE_INFERENCE_FP32,
    RUNTIMES_NOT_APPLICABLE,
    SAMPLE_IDS,
    primary_runtime,
    runtime_predictions_file,
)
from quantgate.stages.evaluate.pir_paddle import paddle_fp32_record
from quantgate.stages.evaluate.summary import Measured, stage_metrics
from quantgate.tasks.text import TextRecognition, character_errors

log = logging.getLogger(__name__)

class NoInt8Kernels(StageError):
    """A runtime runs none of the INT8 model's convolutions and matmuls in INT8: its INT8 numbers would be FP32's."""


@dataclass(frozen=True)
class EvaluateResult:
    predictions_file: str
    metrics: dict


@dataclass
class SplitOutputs:
    """What the accuracy pass keeps of a split, by (runtime, model): the task's predictions; the raw outputs where
    the task stores them (a classifier's class scores; not a text line's [steps, characters] nor a page's map);
    and, per runtime, the largest |FP32 - INT8| output difference, taken batch by batch."""

    predicted: dict[tuple[str, str], np.ndarray]
    outputs: dict[tuple[str, str], np.ndarray]
    max_abs_diff: dict[str, float | None]


def predict_split(runners: dict[tuple[str, str], Runner], data: StoredData, split: str, batch_size: int,
                  num_workers: int) -> SplitOutputs:
    """Every runner's predictions on `split`, read once, batch by batch (each batch feeds all runners, and is
    decoded with its labels: a page's geometry maps its boxes back). A batch's outputs are dropped once decoded
    and compared, unless the task stores them: memory holds a batch of outputs, whatever the split's size."""
    task = data.task
    outputs = {name: [] for name in runners}
    predicted = {name: [] for name in runners}
    differences: dict[str, float | None] = {runtime: None for runtime, _ in runners}
    progress = Progress(log, f"evaluate {split} batch", math.ceil(data.size(split) / batch_size), every_s=5.0)
    for step, (images, labels) in enumerate(data.batches(split, batch_size, num_workers), start=1):
        batch = {}
        for name, run in runners.items():
            batch[name] = run(images)
            predicted[name].append(task.predict(batch[name], labels))
            if task.stores_outputs:
                outputs[name].append(batch[name])
        if task.keeps_outputs:
            for runtime in differences:
                difference = float(np.abs(batch[(runtime, "fp32")] - batch[(runtime, "int8")]).max(initial=0.0))
                differences[runtime] = max(difference, differences[runtime] or 0.0)
        del batch
        progress.step(step)
    return SplitOutputs({name: np.concatenate(values) for name, values in predicted.items()},
                        {name: np.concatenate(values) if values else np.zeros(0, np.float32)
                         for name, values in outputs.items()}, differences)


def checked_int8_ops(runtime: str, runner: Runner) -> dict:
    """The INT8 model's convolution/matmul counts as `runtime` compiled it.

    Raises:
        NoInt8Kernels: none of them runs in INT8.
    """
    counts = runner.int8_ops()
    if counts["int8"] == 0:
        raise NoInt8Kernels(
            f"{runtime} runs none of the {counts['total_conv_matmul']} convolutions/matmuls of the INT8 model "
            f"({runner.form.description}) in INT8 ({counts}); its INT8 numbers would be FP32 numbers. Check that "
            f"the quantize stage quantized these layers, or remove {runtime} from evaluate.runtimes")
    return counts


def evaluate(
    config: EvaluateConfig, fp32_onnx: Path, int8_onnx: Path, data_dir: Path, out_dir: Path,
    paddle2onnx_int8_onnx: Path | None = None, num_workers: int = 0, paddle_fp32_dir: Path | None = None,
    paddle_int8_dir: Path | None = None,
) -> EvaluateResult:
    """Per listed runtime: the task's numbers for both models (top-1 and per-class accuracy; for text line
    accuracy and CER), their agreement, latency per batch (at evaluate.latency_batch_size and at batch 1), speedup,
    sizes and the INT8 kernels it really runs; the accuracy pass runs at evaluate.batch_size, or at the largest batch
    that fits the memory budget (`memory_fit`);
    the top-level metrics are the primary runtime's. Outputs are decoded by the data's task, the same way
    for every model; text also writes the primary runtime's per-character errors (character_errors.json).

    `paddle2onnx_int8_onnx`, when given and onnxruntime is listed, is paddle2onnx's own INT8 model (the same
    PaddleSlim scales before lowering): its onnxruntime accuracy, agreement and latency are reported beside.
    `paddle_fp32_dir`, `paddle_int8_dir`: the export and quantize stage folders (needed for paddle_inference).
    A listed runtime that cannot judge this model's INT8 (paddle_inference for a PIR program: no Paddle INT8
    program) is not run; RUNTIMES_NOT_APPLICABLE says why, and the gate neither passes nor fails it. For a PIR
    program, Paddle Inference's FP32 reading of the test split is still recorded (PADDLE_INFERENCE_FP32:
    stages/evaluate/pir_paddle.py), when paddle_inference is listed.

    Raises:
        RuntimeUnavailable: a listed runtime's package is missing, or its model folders were not given.
        RuntimeNotApplicable: no listed runtime, or not the primary one, applies to the model.
        NoInt8Kernels: a runtime runs none of the INT8 model's convolutions and matmuls in INT8.
        MemoryRefused: not even one sample, or not the latency batch, fits the memory budget.
        StageError: a latency measurement process failed.
        DataError: `data_dir` is not a data stage's output, or an image changed since the data stage.
    """
    listed = tuple(config.runtimes)
    check_runtimes(listed)
    inapplicable = not_applicable_runtimes(listed, paddle_fp32_dir)
    runtimes = tuple(runtime for runtime in listed if runtime not in inapplicable)
    if inapplicable and (not runtimes or primary_runtime(runtimes) != primary_runtime(listed)):
        # The gate names the primary runtime's criteria by their plain names: it must be one that applies.
        raise RuntimeNotApplicable(
            f"evaluate.runtimes {list(listed)}: " + "; ".join(f"{runtime} is not applicable: {why}"
                                                            for runtime, why in inapplicable.items())
            + ". List onnxruntime in evaluate.runtimes: the primary runtime must be one that applies")
    pir_folder = paddle_fp32_dir if PADDLE_INFERENCE in inapplicable else None
    result = _evaluate(config, runtimes, fp32_onnx, int8_onnx, data_dir, out_dir, paddle2onnx_int8_onnx,
                       num_workers, paddle_fp32_dir, paddle_int8_dir, pir_folder)
    if not inapplicable:
        return result
    for runtime, why in inapplicable.items():
        log.info("evaluate: %s not applicable: %s", runtime, why)
    return EvaluateResult(result.predictions_file, {**result.metrics, RUNTIMES_NOT_APPLICABLE: inapplicable})


def _evaluate(config, runtimes, fp32_onnx, int8_onnx, data_dir, out_dir, paddle2onnx_int8_onnx, num_workers,
              paddle_fp32_dir, paddle_int8_dir, pir_folder=None) -> EvaluateResult:
    primary, out_dir, data = primary_runtime(runtimes), Path(out_dir), open_data(data_dir)
    forms = model_forms(runtimes, fp32_onnx, int8_onnx, paddle_fp32_dir, paddle_int8_dir, paddle2onnx_int8_onnx)
    cpu = cpu_record()
    choices = batch_choices(config, forms, data)
    batch_size = choices[ACCURACY_LOOP].batch_size
    latency_batch = data.array("test", limit=config.latency_batch_size)[0]
    batch_shape = (batch_size, *data.input_shape)
    runners = {(runtime, name): open_runner(runtime, form, config.threads, batch_shape)
               for runtime, named in forms.items() for name, form in named.items()}
    int8_ops = {runtime: checked_int8_ops(runtime, runners[(runtime, "int8")]) for runtime in runtimes}
    latency, details = {}, {runtime: {} for runtime in runtimes}
    if OPENVINO in runtimes:
        details[OPENVINO]["inference_precision"] = {
            name: runners[(OPENVINO, name)].inference_precision() for name in ("fp32", "int8")}
    if ONNXRUNTIME in runtimes:
        chosen, timed, details[ONNXRUNTIME] = onnxruntime_int8_form(forms[ONNXRUNTIME], cpu["amx"], latency_batch,
                                                                    config, out_dir)
        if timed is not None:
            latency[ONNXRUNTIME] = timed
        if chosen is not forms[ONNXRUNTIME]["int8"]:
            forms[ONNXRUNTIME]["int8"] = chosen
            runners[(ONNXRUNTIME, "int8")] = open_runner(ONNXRUNTIME, chosen, config.threads, batch_shape)
            int8_ops[ONNXRUNTIME] = checked_int8_ops(ONNXRUNTIME, runners[(ONNXRUNTIME, "int8")])
        float_layers = float_layers_record(forms[ONNXRUNTIME]["int8"].path, int8_ops[ONNXRUNTIME], latency_batch,
                                           config.threads)
        if float_layers is not None:
            details[ONNXRUNTIME][INT8_FLOAT_LAYERS] = float_layers
    # With openvino listed the test split is decoded in this process: DataLoader workers exiting while OpenVINO
    # models are compiled here crashed it (Paddle's SIGCHLD handler; see quantgate/samples/reading.py).
    workers = 0 if OPENVINO in runtimes else num_workers
    task, labels, ids = data.task, data.references("test"), sample_ids(data, "test")
    split = predict_split(runners, data, "test", batch_size, workers)
    del runners  # their worker threads must not share the cores with the latency processes
    return_freed_memory()  # nor their arenas the memory: the latency batch was sized beside this process as it began
    pir_paddle = {} if pir_folder is None else {PADDLE_INFERENCE_FP32: paddle_fp32_record(
        pir_folder, data, batch_size, workers, primary, split.predicted[(primary, "fp32")])}
    log.info("evaluate: predicted %d test samples in %s at batch %d; timing %d runs per model at batch %d and at "
             "batch 1", len(labels), ", ".join(runtimes), batch_size, config.latency_repeats, len(latency_batch))

    measured = {}
    for runtime in runtimes:
        named = forms[runtime]
        at_batch, at_batch1 = measure_forms(runtime, named, latency_batch, config.threads, config.latency_repeats,
                                            timed=latency.get(runtime))
        own = {name: split.outputs[(runtime, name)] for name in named}
        predicted = {name: split.predicted[(runtime, name)] for name in named}
        predictions = runtime_predictions_file(runtime, primary)
        # Strings are stored as numpy unicode arrays (never objects), so they load with allow_pickle=False.
        # sample_ids say which raw sample each row is, so a later version can reuse these predictions (stages/duel).
        # The logits are a classifier's scores; a task that stores no outputs writes empty arrays under the names.
        np.savez(out_dir / predictions, labels=labels, fp32_pred=predicted["fp32"], int8_pred=predicted["int8"],
                 fp32_logits=own["fp32"], int8_logits=own["int8"], **{SAMPLE_IDS: ids})
        measured[runtime] = Measured(named, predicted, split.max_abs_diff[runtime], at_batch, at_batch1,
                                     int8_ops[runtime], library(runtime), predictions, details[runtime])
    metrics = {**stage_metrics(measured, primary, labels, task, config, len(latency_batch), cpu),
               BATCHES_KEY: {loop: choice.record() for loop, choice in choices.items()}, **pir_paddle}
    if isinstance(task, TextRecognition):
        write_character_errors(out_dir / CHARACTER_ERRORS_FILE, primary, labels, measured[primary].predicted)
    return EvaluateResult(runtime_predictions_file(primary, primary), metrics)


def write_character_errors(path: Path, runtime: str, labels: np.ndarray, predicted: dict[str, np.ndarray]) -> None:
    """Per reference character, how often it occurs and how often `runtime`'s FP32 and INT8 models missed it."""
    record = {"runtime": runtime, **{name: character_errors(labels, predicted[name]) for name in ("fp32", "int8")}}
    path.write_text(json.dumps(record, sort_keys=True, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
