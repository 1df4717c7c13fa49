"""What the evaluate stage writes: test-split predictions, and the headline numbers every report shows."""

from quantgate.stages.shared.outputs import StageOutputs

PREDICTIONS_FILE = "predictions.npz"

FP32_TOP1 = "fp32_top1_pct"
INT8_TOP1 = "int8_top1_pct"
ACCURACY_DELTA = "accuracy_delta_pts"
AGREEMENT = "agreement"
LATENCY_P50_FP32 = "latency_ms_p50_fp32"
LATENCY_P50_INT8 = "latency_ms_p50_int8"
SPEEDUP = "speedup_int8_vs_fp32"
MODEL_BYTES_FP32 = "model_bytes_fp32"
MODEL_BYTES_INT8 = "model_bytes_int8"

# What the version record, `quantgate versions`, the summary and the Prefect artifact show.
HEADLINE_METRICS = (FP32_TOP1, INT8_TOP1, ACCURACY_DELTA, AGREEMENT, LATENCY_P50_FP32, LATENCY_P50_INT8, SPEEDUP,
                    MODEL_BYTES_FP32, MODEL_BYTES_INT8)

OUTPUTS = StageOutputs(
    stage="evaluate",
    description="FP32 vs INT8 in onnxruntime on the test split: top-1, agreement, per-class, latency, sizes",
    files=(PREDICTIONS_FILE,),
    metrics=(*HEADLINE_METRICS, "test_samples", "max_abs_logit_diff", "per_class_top1_pct_fp32",
             "per_class_top1_pct_int8", "latency_batch_size", "latency_repeats", "ort_threads",
             "size_ratio_int8_vs_fp32", "onnxruntime"),
)
