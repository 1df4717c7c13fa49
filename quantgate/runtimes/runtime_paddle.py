"""Paddle Inference on the CPU with oneDNN: export's FP32 program, and quantize's PaddleSlim INT8 program with
oneDNN's INT8 passes (enable_onednn_int8), which turn the quantize_linear/dequantize_linear pairs into
int8 oneDNN kernels with PaddleSlim's scales.

What runs in INT8 is read from the program after those passes: with enable_save_optim_model the predictor
writes it (`_optimized.pdmodel`) to a scratch folder, and a convolution or matmul counts as INT8 when the
passes gave it mkldnn_data_type "int8" and weight scales (cpu_quantize_pass sets both only on the ops it
quantizes). The same program says what the passes left around those kernels: the quantize/dequantize
ops that convert between float and int8 at run time, and the ops that still compute in float between them
(on PP-OCRv4's recognizer: its learnable affines, and HardSwishes that FP32 fuses into the add before them).
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import paddle
import paddle.inference as paddle_infer
from paddle.base.proto import framework_pb2

from quantgate.runtimes.forms import ModelForm, RuntimeCannotRun
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE

CONV_MATMUL_OPS = ("conv2d", "fused_conv2d", "depthwise_conv2d", "conv2d_transpose", "fc", "mul", "matmul",
                   "matmul_v2", "fused_matmul")
CONVERSION_OPS = ("quantize", "dequantize", "requantize")  # oneDNN's float <-> int8 conversions
# Ops that move or describe data and compute nothing: never counted as float compute.
DATA_OPS = ("feed", "fetch", "assign", "shape", "slice", "reshape2", "squeeze2", "unsqueeze2",
            "flatten_contiguous_range", "transpose2", "fused_transpose", "concat", "split", "fill_constant")
OPTIMIZED_PROGRAM = "_optimized.pdmodel"  # what enable_save_optim_model writes into the optim cache folder
FAILED_OP = re.compile(r"\[operator < (\S+) > error\]")  # how Paddle names the op an error came from


def library() -> str:
    return f"paddle_inference {paddle.__version__} (oneDNN)"


def _config(form: ModelForm, threads: int) -> paddle_infer.Config:
    config = paddle_infer.Config(str(form.path / MODEL_FILE), str(form.path / PARAMS_FILE))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    config.switch_ir_optim(True)
    config.enable_memory_optim()  # tensors reuse memory: without it every activation of a batch is held (PP-OCRv4 rec: 0.12 GB a line)
    config.enable_onednn()
    if form.int8:
        config.enable_onednn_int8()
    config.disable_glog_info()
    return config


def optimized_program(form: ModelForm) -> framework_pb2.ProgramDesc:
    """The program Paddle Inference's passes make of `form`, as this module configures it."""
    with tempfile.TemporaryDirectory(prefix="quantgate-paddle-") as scratch:
        config = _config(form, 1)
        config.enable_save_optim_model(True)
        config.set_optim_cache_dir(scratch)
        paddle_infer.create_predictor(config)  # runs the passes and writes the program they produced
        program = framework_pb2.ProgramDesc()
        program.ParseFromString((Path(scratch) / OPTIMIZED_PROGRAM).read_bytes())
    return program


def int8_ops(form: ModelForm) -> dict:
    """Convolutions and matmuls of `form`'s program after Paddle Inference's passes, how many are INT8, and what
    the passes left around them (conversions, float compute)."""
    kinds, conversions, float_compute = Counter(), Counter(), Counter()
    for op in optimized_program(form).blocks[0].ops:
        attrs = {attr.name: attr for attr in op.attrs}
        data_type = attrs["mkldnn_data_type"].s if "mkldnn_data_type" in attrs else "float32"
        if op.type in CONVERSION_OPS:
            conversions[op.type] += 1
        elif op.type in CONV_MATMUL_OPS:
            quantized = data_type == "int8" and "Scale_weights" in attrs and len(attrs["Scale_weights"].floats) > 0
            kinds[f"{op.type} {'int8' if quantized else data_type}"] += 1
        elif op.type not in DATA_OPS and data_type != "int8":
            float_compute[op.type] += 1
    int8 = sum(count for kind, count in kinds.items() if kind.endswith(" int8"))
    return {"int8": int8, "total_conv_matmul": sum(kinds.values()), "ops": dict(sorted(kinds.items())),
            "conversions": dict(sorted(conversions.items())),
            "float_compute": dict(sorted(float_compute.items(), key=lambda kv: (-kv[1], kv[0])))}


class Runner:
    """One Paddle inference program in Paddle Inference (oneDNN): images -> logits."""

    def __init__(self, form: ModelForm, threads: int, batch_shape: tuple[int, ...] = ()):
        self.form, self.threads = form, threads
        self.predictor = paddle_infer.create_predictor(_config(form, threads))
        self.input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self.output = self.predictor.get_output_handle(self.predictor.get_output_names()[0])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Raises: RuntimeCannotRun: Paddle Inference fails on the program (the failing op named)."""
        self.input.reshape(list(images.shape))
        self.input.copy_from_cpu(np.ascontiguousarray(images))
        try:
            self.predictor.run()
        except (ValueError, RuntimeError, OSError) as exc:
            found = FAILED_OP.search(str(exc))
            op = f"its op {found.group(1)}" if found else "the program"
            first = str(exc).strip().splitlines()[0][:240]
            raise RuntimeCannotRun(
                f"paddle_inference (oneDNN{' INT8' if self.form.int8 else ''}) cannot run {self.form.description}: "
                f"{op} fails ({first}); nothing fell back to another runtime. Remove paddle_inference from "
                "evaluate.runtimes for this model (a DB detector's conv2d_transpose is known to fail in oneDNN "
                "INT8), or gate it in the runtimes it runs in") from exc
        return self.output.copy_to_cpu()

    def int8_ops(self) -> dict:
        """Convolutions and matmuls of the program after Paddle Inference's passes, and how many are INT8."""
        return int8_ops(self.form)
