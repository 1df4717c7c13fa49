"""What an ONNX model is made of: op counts, integer kernels and int8 weights, in the file and as
onnxruntime runs it; each tensor's readers; and dropping the initializers no node reads."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

INTEGER_OPS = ("QLinearConv", "QLinearMatMul", "QGemm", "ConvInteger", "MatMulInteger", "MatMulIntegerToFloat",
               "DynamicQuantizeMatMul", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearReduceMean")


def copied_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """A detached copy of `node`, safe to keep after its graph's node list is cleared and rebuilt."""
    copied = onnx.NodeProto()
    copied.CopyFrom(node)
    return copied


def tensor_readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor's reading nodes, in graph order (a node reading a tensor twice is listed twice)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the initializers no node or graph output reads (left behind by graph rewrites)."""
    used = {name for node in graph.node for name in node.input} | {output.name for output in graph.output}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)


def integer_op_counts(model: onnx.ModelProto) -> dict:
    """Counts a reader needs to see that a model runs integer kernels: ops and integer weights."""
    ops = Counter(node.op_type for node in model.graph.node)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:  # paddle2onnx keeps weights in Constant nodes
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    zero_points = {node.input[2] for node in model.graph.node
                   if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2}
    int8 = [values for name, values in constants.items()
            if values.dtype in (np.int8, np.uint8) and values.size > 1 and name not in zero_points]
    initializers = list(constants.values())
    return {
        "ops": dict(sorted(ops.items())),
        "integer_ops": sum(ops.get(op, 0) for op in INTEGER_OPS),
        "quantize_linear": ops.get("QuantizeLinear", 0),
        "dequantize_linear": ops.get("DequantizeLinear", 0),
        "int8_initializers": len(int8),
        "int8_weight_values": int(sum(values.size for values in int8)),
        "float_weight_values": int(sum(values.size for values in initializers if values.dtype == np.float32)),
    }


def runtime_op_counts(onnx_file: Path) -> dict:
    """The same counts on the graph onnxruntime actually runs (after its QDQ fusions, CPU provider)."""
    with tempfile.TemporaryDirectory(prefix="quantgate-ort-") as scratch:
        optimized = Path(scratch) / "optimized.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(optimized)
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # it warns that the saved graph is hardware specific; that is the point
        ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        counts = integer_op_counts(onnx.load(str(optimized)))
    return {key: counts[key] for key in ("ops", "integer_ops", "quantize_linear", "dequantize_linear")}
