"""What the export stage writes: the FP32 inference model in Paddle's legacy program format."""

from quantgate.stages.shared.outputs import StageOutputs

MODEL_PREFIX = "model"
MODEL_FILE = f"{MODEL_PREFIX}.pdmodel"
PARAMS_FILE = f"{MODEL_PREFIX}.pdiparams"
REFERENCE_OUTPUTS_FILE = "reference_outputs.npy"  # an imported model: its outputs on one test batch
PIR_MODEL_FILE = f"{MODEL_PREFIX}.json"  # a PIR model (Paddle 3's default) in place of MODEL_FILE: export_pir
FP32_ONNX_FILE = "fp32.onnx"  # a PIR export: paddle2onnx 2.x's FP32 ONNX model, checked (quantize calibrates it)
FP32_ONNX = "fp32_onnx"  # a PIR export's metric: that conversion's record (converter, patches, check vs Paddle)
PROGRAM_FORMAT = "program_format"  # "legacy" or "pir": who reads the model (PaddleSlim, or paddle2onnx 2.x)

OUTPUTS = StageOutputs(
    stage="export",
    description="paddle.jit.save of the float32 master weights, checked against the trained model",
    files=(PARAMS_FILE,),
    optional_files=(MODEL_FILE, PIR_MODEL_FILE, REFERENCE_OUTPUTS_FILE, FP32_ONNX_FILE),  # MODEL_FILE or PIR_MODEL_FILE
    metrics=("format", "parameters", "parameter_dtypes", "max_abs_diff_vs_trained", "max_abs_diff_limit",
             "checked_samples", "output_shape", "reference", PROGRAM_FORMAT, "paddle_inference", FP32_ONNX),
)
