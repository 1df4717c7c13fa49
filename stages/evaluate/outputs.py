"""What the evaluate stage writes: test-split predictions per runtime, and the headline numbers every report shows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from quantgate.stages.shared.outputs import StageOutputs

ONNXRUNTIME, OPENVINO, PADDLE_INFERENCE = "onnxruntime", "openvino", "paddle_inference"
RUNTIME_NAMES = (ONNXRUNTIME, OPENVINO, PADDLE_INFERENCE)  # the values evaluate.runtimes accepts

PREDICTIONS_FILE = "predictions.npz"  # the primary runtime's
SAMPLE_IDS = "sample_ids"  # in every predictions file: which raw sample each test row is (evaluations since issue 27)
# onnxruntime's INT8 model with uint8 weights, so QLinearConv takes MLAS's quantized GEMM (AMX) instead of
# ConvSym; written only on CPUs with AMX, where the faster of the two is evaluated (quantgate/runtimes/ort_forms.py).
QGEMM_INT8_FILE = "int8_qgemm.onnx"

FP32_TOP1 = "fp32_top1_pct"
INT8_TOP1 = "int8_top1_pct"
ACCURACY_DELTA = "accuracy_delta_pts"
AGREEMENT = "agreement"
LATENCY_P50_FP32 = "latency_ms_p50_fp32"
LATENCY_P50_INT8 = "latency_ms_p50_int8"
SPEEDUP = "speedup_int8_vs_fp32"
MODEL_BYTES_FP32 = "model_bytes_fp32"
MODEL_BYTES_INT8 = "model_bytes_int8"

# Every runtime's models are also timed at batch 1 (one input, as a service answering one request at a
# time runs them), in the same process and the same way as at the evaluated batch (latency_batch_size). The keys
# are those at the evaluated batch with BATCH1_SUFFIX; an evaluation from before has none of them.
BATCH1 = 1
BATCH1_SUFFIX = "_batch1"
LATENCY_P50_FP32_BATCH1 = f"{LATENCY_P50_FP32}{BATCH1_SUFFIX}"
LATENCY_P50_INT8_BATCH1 = f"{LATENCY_P50_INT8}{BATCH1_SUFFIX}"
SPEEDUP_BATCH1 = f"{SPEEDUP}{BATCH1_SUFFIX}"

# Issue 17: what the task is, and what its accuracy keys measure. Text recognition stores line accuracy under
# the *_top1_pct keys (the gate, the search and the release regression read one accuracy) and adds the CER.
TASK = "task"  # "classification" | "text_recognition"
ACCURACY_METRIC = "accuracy_metric"  # what *_top1_pct measure, in words: "top-1" | "line accuracy"
FP32_CER = "fp32_cer_pct"
INT8_CER = "int8_cer_pct"
CER_INCREASE = "cer_increase_pts"  # INT8's CER minus FP32's, in points; the gate's max_cer_increase_pts reads it
HMEAN_DROP = "hmean_drop_pts"  # text detection: FP32 hmean - INT8 hmean, in points (positive: INT8 worse)
TEXT_METRICS = (FP32_CER, INT8_CER, CER_INCREASE)
DETECTION_METRICS = ("fp32_precision_pct", "int8_precision_pct", "fp32_recall_pct", "int8_recall_pct", HMEAN_DROP)
# text_recognition: per reference character, how often it occurs and how often FP32 / INT8 missed it
# ({"runtime": primary, "fp32": {char: {"count", "errors"}}, "int8": {...}}), for the report's table.
CHARACTER_ERRORS_FILE = "character_errors.json"

# Issue 18: the top-level metrics are the primary runtime's; every listed runtime has its entry under RUNTIMES.
RUNTIMES = "runtimes"
PRIMARY_RUNTIME = "primary_runtime"
CPU = "cpu"
FP32_MODEL, INT8_MODEL, INT8_OPS, LIBRARY = "fp32_model", "int8_model", "int8_ops", "library"
PREDICTIONS_FILE_KEY = "predictions_file"
# In onnxruntime's entry, when the INT8 model keeps float layers (a recognizer's LSTM, the search's FP32
# fall-backs): their counts and share of its kernel time (stages/evaluate/float_layers.py).
INT8_FLOAT_LAYERS = "int8_float_layers"
# {runtime: why} for each listed runtime that cannot judge the model's INT8 at all (Paddle Inference and a PIR
# program: quantgate.runtimes.forms.not_applicable_runtimes); such a runtime has no entry under RUNTIMES, and the
# gate neither passes nor fails it.
RUNTIMES_NOT_APPLICABLE = "runtimes_not_applicable"
# A PIR program's FP32 reading of the test split in Paddle Inference, recorded beside (not gated) when
# paddle_inference is listed: {"ran", top1_pct (cer_pct), same_prediction_pct, onednn, ...} (stages/evaluate/pir_paddle)
PADDLE_INFERENCE_FP32 = "paddle_inference_fp32"
ORT_INT8_PATH = "ort_int8_path"  # in onnxruntime's entry: which MLAS kernel family its INT8 convolutions take

# What the version record, `quantgate versions`, the summary and the Prefect artifact show.
HEADLINE_METRICS = (FP32_TOP1, INT8_TOP1, ACCURACY_DELTA, AGREEMENT, LATENCY_P50_FP32, LATENCY_P50_INT8, SPEEDUP,
                    MODEL_BYTES_FP32, MODEL_BYTES_INT8)


def headline_keys(evaluation: Mapping) -> tuple[str, ...]:
    """The headline metrics of an evaluation: HEADLINE_METRICS, and for text recognition its task, what the
    accuracy measures and the character error rates (classification records stay as they were)."""
    task = evaluation.get(TASK)
    if task == "text_recognition":
        return (*HEADLINE_METRICS, TASK, ACCURACY_METRIC, *TEXT_METRICS)
    if task == "text_detection":
        return (*HEADLINE_METRICS, TASK, ACCURACY_METRIC, *DETECTION_METRICS)
    if task == "ocr_system":  # end-to-end line accuracy under the top-1 keys; per-page latency
        return tuple(key for key in (*HEADLINE_METRICS, TASK, ACCURACY_METRIC, "e2e_line_drop_pts", *TEXT_METRICS)
                     if key in evaluation)
    return HEADLINE_METRICS


def latency_key(stat: str, model: str, batch1: bool = False) -> str:
    """The metric key of a latency statistic (p10, p50, p90, runs) of a model ("fp32", "int8", ...): at the evaluated
    batch, or at batch 1."""
    return f"latency_ms_{stat}_{model}{BATCH1_SUFFIX if batch1 else ''}"


def primary_runtime(runtimes: Iterable[str]) -> str:
    """onnxruntime when listed, else the first listed runtime: the one the top-level metrics belong to."""
    listed = tuple(runtimes)
    return ONNXRUNTIME if ONNXRUNTIME in listed or not listed else listed[0]


def runtime_predictions_file(runtime: str, primary: str) -> str:
    """The predictions file of `runtime`: predictions.npz for the primary one, predictions_<runtime>.npz otherwise."""
    return PREDICTIONS_FILE if runtime == primary else f"predictions_{runtime}.npz"


OUTPUTS = StageOutputs(
    stage="evaluate",
    description="FP32 vs INT8 on the test split in each listed runtime: top-1 (line accuracy and CER for text), "
    "agreement, per-class, latency (at the evaluated batch and at batch 1), sizes, INT8 kernels",
    # labels, fp32_pred, int8_pred: int64 classes, or unicode strings for text; sample_ids (quantgate/samples/sample_ids.py)
    files=(PREDICTIONS_FILE,),
    # onnxruntime, when listed, is always the primary runtime: it never has a file of its own name
    optional_files=(*(runtime_predictions_file(name, ONNXRUNTIME) for name in RUNTIME_NAMES if name != ONNXRUNTIME),
                    QGEMM_INT8_FILE, CHARACTER_ERRORS_FILE),
    metrics=(*HEADLINE_METRICS, "test_samples", "max_abs_logit_diff", "per_class_top1_pct_fp32",
             "per_class_top1_pct_int8", "latency_batch_size", "latency_repeats", "ort_threads",
             "size_ratio_int8_vs_fp32", LATENCY_P50_FP32_BATCH1, LATENCY_P50_INT8_BATCH1, SPEEDUP_BATCH1,
             "onnxruntime", RUNTIMES, RUNTIMES_NOT_APPLICABLE, PRIMARY_RUNTIME, CPU, TASK, ACCURACY_METRIC,
             *TEXT_METRICS, "paddle2onnx_int8_cer_pct", PADDLE_INFERENCE_FP32),
)
