"""What the convert stage writes: both models as ONNX, the INT8 one lowered to integer kernels."""

from quantgate.stages.shared.outputs import StageOutputs

OPSET = 13
FP32_FILE = "fp32.onnx"
INT8_FILE = "int8.onnx"  # the lowered model: the one evaluated, gated and released
PADDLE2ONNX_INT8_FILE = "int8_paddle2onnx.onnx"  # paddle2onnx's own INT8, kept for comparison

OUTPUTS = StageOutputs(
    stage="convert",
    description="paddle2onnx of the FP32 and INT8 models; INT8 lowered to onnxruntime's integer kernels",
    files=(FP32_FILE, INT8_FILE, PADDLE2ONNX_INT8_FILE),
)
