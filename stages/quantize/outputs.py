"""What the quantize stage writes: PaddleSlim's INT8 model (under the FP32 file names) and the search record."""

from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.shared.outputs import StageOutputs

SEARCH_FILE = "search.json"
# A PIR model (PaddleSlim reads no PIR program): INT8 calibrated by quantgate on the export's FP32 ONNX graph, in
# place of MODEL_FILE and PARAMS_FILE: the raw Q/DQ graph and the scales its program would hold (convert lowers them).
CALIBRATED_ONNX_FILE = "int8_calibrated.onnx"
PROGRAM_SCALES_FILE = "program_scales.json"
CALIBRATED_BY = "calibrated_by"  # who calibrated the INT8 model, in words (absent: PaddleSlim on the Paddle program)
SEARCH = "search"  # the search's summary in the manifest; absent for strategy 'single'
# In the search's summary (and search.json):
FRONTIER = "frontier"  # every trial and the final calibration: drop, speed-up, FP32 layers, `pareto`, `kept`
POLICY_COST = "policy_cost"  # one sentence: what meeting the policy cost in FP32 layers and speed
POLICY_MAX_DROP = "policy_max_accuracy_drop_pts"  # the policy's accuracy threshold in onnxruntime (hmean: detection)
POLICY_MIN_AGREEMENT = "policy_min_agreement"  # the policy's agreement threshold in onnxruntime
DECISIONS = "decisions"  # the paired (McNemar) decisions between candidates, when the search made any

OUTPUTS = StageOutputs(
    stage="quantize",
    description="PaddleSlim post-training INT8, one recipe or the accuracy-aware search on the validation split",
    files=(),
    optional_files=(MODEL_FILE, PARAMS_FILE, SEARCH_FILE, CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE),
    metrics=("algo", "recipe", "skip_tensors", "calibration_batches", "calibration_samples",
             "calibration_forward_batches", "calibration_forward_s", "calibration_statistics_s",
             "calibration_statistics_reused", "equalized_tensors", "quantize_linear_ops", "dequantize_linear_ops",
             "fp32_ops", "int8_ops",
             SEARCH, CALIBRATED_BY),
)
