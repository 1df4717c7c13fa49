"""Which INT8 form onnxruntime is evaluated with: ConvSym everywhere, and on AMX CPUs the faster of two forms.

MLAS runs QLinearConv with symmetric int8 weights on its ConvSym kernels (AVX2, AVX512, AVX512-VNNI,
AVX-VNNI); ConvSym has no AMX kernels, MLAS's quantized GEMM (im2col + QGEMM) has. The convert stage's
int8.onnx with every convolution's weights shifted to uint8 (w + 128, zero point 128) computes exactly the
same (int8 values plus 128 are exactly the uint8 range), but is no longer symmetric, so QLinearConv takes
the GEMM path. On a CPU with AMX-INT8 the evaluate stage writes that form, times both in the latency
process, and evaluates and records the faster; elsewhere the ConvSym form is evaluated without a trial.
Measured on an AVX512-VNNI CPU without AMX (2 threads): identical logits, GEMM form 2-2.5x slower
(ResNet18 batch 16: 79 vs 197 ms; MobileNetV2: 28 vs 53 ms).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.config import EvaluateConfig
from quantgate.runtimes.forms import ModelForm
from quantgate.runtimes.latency import measure
from quantgate.stages.evaluate.outputs import ORT_INT8_PATH, QGEMM_INT8_FILE

CONVSYM_PATH = "ConvSym (QLinearConv)"
QGEMM_PATH = "QGEMM (QLinearConv, uint8 weights)"
QGEMM_TRIAL = "int8_qgemm"  # the latency name of the GEMM form while both are timed
CONVSYM_TRIAL = "int8_convsym"  # the ConvSym form's latency name once the GEMM form won


def write_qgemm_form(int8_onnx: Path, out_file: Path) -> int:
    """`int8_onnx` with its convolutions' int8 weights as uint8 (w + 128, zero point 128), saved to `out_file`.

    Depthwise convolutions keep int8 weights (MLAS runs them on its depthwise kernels either way), and so does
    a weight whose zero point is not 0 or whose tensors other nodes read too. Returns the weights shifted.
    """
    model = onnx.load(str(int8_onnx))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    readers = Counter(name for node in graph.node for name in node.input)
    producers = {output: node for node in graph.node for output in node.output}
    shifted = 0
    for node in graph.node:
        dequantize = producers.get(node.input[1]) if node.op_type == "Conv" else None
        if dequantize is None or dequantize.op_type != "DequantizeLinear" or len(dequantize.input) < 3:
            continue
        weight, zero_point = initializers.get(dequantize.input[0]), initializers.get(dequantize.input[2])
        if weight is None or zero_point is None or weight.data_type != onnx.TensorProto.INT8:
            continue
        group = next((attribute.i for attribute in node.attribute if attribute.name == "group"), 1)
        if readers[weight.name] != 1 or readers[zero_point.name] != 1 or (group > 1 and weight.dims[1] == 1):
            continue
        values, zeros = numpy_helper.to_array(weight), numpy_helper.to_array(zero_point)
        if zeros.any():
            continue
        weight.CopyFrom(numpy_helper.from_array((values.astype(np.int16) + 128).astype(np.uint8), weight.name))
        zero_point.CopyFrom(numpy_helper.from_array(np.full(zeros.shape, 128, np.uint8), zero_point.name))
        shifted += 1
    onnx.save(model, str(out_file))
    return shifted


def onnxruntime_int8_form(forms: dict[str, ModelForm], amx: bool, batch: np.ndarray, config: EvaluateConfig,
                          out_dir: Path) -> tuple[ModelForm, dict | None, dict]:
    """The INT8 form onnxruntime is evaluated with, and the record of the choice ({"ort_int8_path", and on AMX
    both forms' medians}). Without AMX: forms["int8"], no latency measured. With AMX: the faster form and
    the latencies of all `forms` (fp32, int8 and any other), timed with the GEMM form in the latency process;
    the GEMM form is written to `out_dir` and kept there only when it is the faster one.
    """
    if not amx:
        return forms["int8"], None, {ORT_INT8_PATH: CONVSYM_PATH}
    models = {name: form.path for name, form in forms.items()}
    qgemm_file = Path(out_dir) / QGEMM_INT8_FILE
    shifted = write_qgemm_form(forms["int8"].path, qgemm_file)
    timed = measure({**models, QGEMM_TRIAL: qgemm_file}, batch, config.threads, config.latency_repeats)
    medians = {CONVSYM_PATH: timed["int8"]["p50"], QGEMM_PATH: timed[QGEMM_TRIAL]["p50"]}
    record = {"ort_int8_paths_ms_p50": medians, "ort_int8_weights_shifted": shifted}
    if shifted and medians[QGEMM_PATH] < medians[CONVSYM_PATH]:
        form = ModelForm(qgemm_file, True, f"{QGEMM_INT8_FILE} (QDQ, uint8 conv weights; QLinearConv on MLAS's "
                         "quantized GEMM)", "evaluate")
        latency = {**timed, "int8": timed[QGEMM_TRIAL], CONVSYM_TRIAL: timed["int8"]}
        del latency[QGEMM_TRIAL]
        return form, latency, {ORT_INT8_PATH: QGEMM_PATH, **record}
    qgemm_file.unlink()  # the slower form is not part of the evaluation's output
    latency = {name: stats for name, stats in timed.items() if name != QGEMM_TRIAL}
    return forms["int8"], latency, {ORT_INT8_PATH: CONVSYM_PATH, **record}
