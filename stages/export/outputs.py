"""What the export stage writes: the FP32 inference model in Paddle's legacy program format."""

from quantgate.stages.shared.outputs import StageOutputs

MODEL_PREFIX = "model"
MODEL_FILE = f"{MODEL_PREFIX}.pdmodel"
PARAMS_FILE = f"{MODEL_PREFIX}.pdiparams"
REFERENCE_OUTPUTS_FILE = "reference_outputs.npy"  # an imported model: its outputs on one test batch

OUTPUTS = StageOutputs(
    stage="export",
    description="paddle.jit.save of the float32 master weights, checked against the trained model",
    files=(MODEL_FILE, PARAMS_FILE),
    optional_files=(REFERENCE_OUTPUTS_FILE,),
    metrics=("format", "parameters", "parameter_dtypes", "max_abs_diff_vs_trained", "max_abs_diff_limit",
             "checked_samples", "output_shape", "reference"),
)
