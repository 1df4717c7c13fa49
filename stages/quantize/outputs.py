"""What the quantize stage writes: PaddleSlim's INT8 model (under the FP32 file names) and the search record."""

from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.shared.outputs import StageOutputs

SEARCH_FILE = "search.json"
SEARCH = "search"  # the search's summary in the manifest; absent for strategy 'single'

OUTPUTS = StageOutputs(
    stage="quantize",
    description="PaddleSlim post-training INT8, one recipe or the accuracy-aware search on the validation split",
    files=(MODEL_FILE, PARAMS_FILE),
    optional_files=(SEARCH_FILE,),
    metrics=("algo", "recipe", "skip_tensors", "calibration_batches", "calibration_samples",
             "calibration_forward_batches", "calibration_forward_s", "calibration_statistics_s",
             "calibration_statistics_reused", "equalized_tensors", "quantize_linear_ops", "dequantize_linear_ops",
             "fp32_ops", "int8_ops",
             SEARCH),
)
