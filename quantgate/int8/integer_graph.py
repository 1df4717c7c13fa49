"""One description of the deployed INT8 graph, and a check of onnxruntime's integer kernels against it, op by op.

    graph = describe(model)                      # every integer tensor and integer op of the lowered QDQ model
    graph.summary()                              # counts for a manifest; graph.record() adds each tensor
    checks = check_ops(model, {"x": images})     # onnxruntime's codes against `simulate_op`, per integer op
    logits = simulate_model(model, {"x": images})

In the QDQ model `lower_int8` writes, an integer tensor is a tensor of codes: a QuantizeLinear's output, or an
integer initializer a DequantizeLinear reads (int8 weights, int32 biases, `integer_hardswish`'s uint8 constants).
Its grid (real = (code - zero point) x scale) is the one it is written with; a DequantizeLinear may read it on
another, where `affine_absorption` moved an affine into the read (`read_grids`). An integer op is a float node
whose inputs all are DequantizeLinear outputs and whose output goes to one QuantizeLinear alone: the unit
onnxruntime fuses into QLinearConv, QLinearAdd... (a linear layer with a float output, MatMulIntegerToFloat, is not).

Neither simulation uses onnxruntime. `simulate_op` is hand-written numpy in float64: a difference from onnxruntime's
codes is its rounding (1 code) or a kernel computing something else (u8 x s8 sums saturating on AVX2 with 8-bit
weights, a file changed since it was described), never a float32 error of ours. `simulate_model` composes the ops
`check_ops` checks (`simulate_op`) with onnx's reference evaluator, onnx's numpy implementation of each op's
specification, for the nodes that never run in integers (LayerNorm, softmax, reshapes).

Measured on the pattern nets (tests/support/pattern_nets.py, onnxruntime 1.32, a VNNI/AMX CPU, 7- and 8-bit weights):
- exposing the codes as graph outputs leaves every fused integer kernel in place, adding a Transpose per tensor
  the NHWC integer convolutions hand back as NCHW. `OpCheck.kernel`: the kernel onnxruntime ran for the op.
- every integer op is within 1 code of `simulate_op`; the differences are roundings at or next to a half, such as
  HardSwish's x + 3 at x = 0 (127.5 codes of 6/255), which QLinearAdd rounds down and QuantizeLinear to even.
- onnxruntime holds a Conv's int32 bias to the scale its kernel assumes (input scale x weight scale): a bias scale
  a few percent off makes it run that Conv in float (kernel "QuantizeLinear"), as the model says, not wrong codes.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from quantgate.int8.weight_range import REDUCED_HIGH, REDUCED_LOW


def _rounded(value: float) -> float:
    return float(f"{float(value):.6g}")


@dataclass(frozen=True, eq=False)
class Grid:
    """How codes map to reals: real = (code - zero_point) x scale, per channel along `axis` where it is set."""

    scale: np.ndarray  # float32, as stored: shape () or (channels,)
    zero_point: np.ndarray  # the codes' dtype, the scale's shape
    axis: int | None

    @property
    def dtype(self) -> str:
        return self.zero_point.dtype.name

    def same_as(self, other: Grid) -> bool:
        return (self.axis == other.axis and self.dtype == other.dtype and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point, other.zero_point))

    def _along(self, values: np.ndarray, ndim: int) -> np.ndarray:
        if self.axis is None:
            return values.astype(np.float64)
        shape = [1] * ndim
        shape[self.axis] = -1
        return values.astype(np.float64).reshape(shape)

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        """DequantizeLinear in float64."""
        return (codes.astype(np.float64) - self._along(self.zero_point, codes.ndim)) * self._along(self.scale, codes.ndim)

    def quantize(self, values: np.ndarray) -> np.ndarray:
        """QuantizeLinear in float64: divide, round half to even, add the zero point, saturate to the dtype."""
        limits = np.iinfo(self.zero_point.dtype)
        codes = np.rint(values / self._along(self.scale, values.ndim)) + self._along(self.zero_point, values.ndim)
        return np.clip(codes, limits.min, limits.max).astype(self.zero_point.dtype)

    def record(self) -> dict:
        """Scale and zero point; per channel, their axis, channel count and range."""
        if self.axis is None:
            return {"scale": _rounded(self.scale), "zero_point": int(self.zero_point)}
        low, high = int(self.zero_point.min()), int(self.zero_point.max())
        return {"scale": {"axis": self.axis, "channels": int(self.scale.size), "min": _rounded(self.scale.min()),
                          "max": _rounded(self.scale.max())},
                "zero_point": low if low == high else {"min": low, "max": high}}


@dataclass(frozen=True, eq=False)
class IntegerTensor:
    """A tensor of codes: where it comes from, the grid it is written with and the float ops that read it."""

    name: str
    grid: Grid  # its QuantizeLinear's, or for an initializer its first DequantizeLinear's
    bits: int  # 8; 7 for int8 weights on onnxruntime's reduced range [-64, 63] (`weight_range`); 32 for a bias
    initializer: bool
    producer: str  # the float op its QuantizeLinear quantizes ("" for an initializer or a graph input)
    readers: tuple[str, ...]  # the float ops that read it through a DequantizeLinear
    read_grids: tuple[Grid, ...]  # other grids a DequantizeLinear reads it on (an affine absorbed into the read)

    @property
    def dtype(self) -> str:
        return self.grid.dtype

    def record(self) -> dict:
        record = {"name": self.name, "dtype": self.dtype, "bits": self.bits, **self.grid.record(),
                  "from": self.producer or ("initializer" if self.initializer else "graph input"),
                  "to": list(self.readers)}
        if self.read_grids:
            record["read_as"] = [grid.record() for grid in self.read_grids]
        return record


@dataclass(frozen=True)
class OpInput:
    """One input of an integer op: the codes it dequantizes and the grid it reads them on."""

    codes: str
    grid: Grid


@dataclass(frozen=True, eq=False)
class IntegerOp:
    """A float node between DequantizeLinears and one QuantizeLinear: one integer kernel in onnxruntime."""

    node: onnx.NodeProto
    inputs: tuple[OpInput | None, ...]  # one per node input; None for an omitted optional input
    output: str  # the codes its QuantizeLinear writes
    output_grid: Grid
    constants: Mapping[str, np.ndarray]  # the codes of its inputs that are initializers

    @property
    def name(self) -> str:
        return self.node.name or self.node.output[0]

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def activation_inputs(self) -> tuple[str, ...]:
        """The codes computed at run time (not initializers) that the op reads."""
        return tuple(dict.fromkeys(i.codes for i in self.inputs if i is not None and i.codes not in self.constants))


@dataclass(frozen=True)
class IntegerGraph:
    """Every integer tensor and integer op of a lowered QDQ model (`describe`)."""

    tensors: tuple[IntegerTensor, ...]
    ops: tuple[IntegerOp, ...]

    def summary(self) -> dict:
        """Counts for a manifest: integer ops per type, integer tensors per dtype and per bit width."""
        return {
            "integer_ops": len(self.ops),
            "integer_ops_by_type": dict(sorted(Counter(op.op_type for op in self.ops).items())),
            "integer_tensors": len(self.tensors),
            "integer_tensors_by_dtype": dict(sorted(Counter(tensor.dtype for tensor in self.tensors).items())),
            "integer_tensors_by_bits": {str(bits): count for bits, count in
                                        sorted(Counter(tensor.bits for tensor in self.tensors).items())},
            "per_channel_tensors": sum(tensor.grid.axis is not None for tensor in self.tensors),
            "tensors_read_on_another_grid": sum(bool(tensor.read_grids) for tensor in self.tensors),
        }

    def record(self) -> dict:
        """`summary()` and each tensor (JSON-able, scales to 6 significant digits)."""
        return {**self.summary(), "tensors": [tensor.record() for tensor in self.tensors]}


def _label(node: onnx.NodeProto) -> str:
    return f"{node.name or node.output[0]} ({node.op_type})"


def _grid(node: onnx.NodeProto, constants: Mapping[str, np.ndarray], codes_dtype: np.dtype) -> Grid:
    """The grid of a QuantizeLinear or DequantizeLinear whose scale and zero point are initializers."""
    if node.input[1] not in constants or (len(node.input) > 2 and node.input[2] and node.input[2] not in constants):
        raise NotImplementedError(f"{_label(node)} computes its scale or zero point at run time; only "
                                  "initializers are described")
    scale = constants[node.input[1]]
    has_zero_point = len(node.input) > 2 and node.input[2]
    zero_point = constants[node.input[2]] if has_zero_point else np.zeros_like(scale, codes_dtype)
    axis = next((attribute.i for attribute in node.attribute if attribute.name == "axis"), 1)
    return Grid(scale, zero_point, axis if scale.ndim == 1 else None)


def _bits(codes: np.ndarray) -> int:
    """8 for uint8/int8 codes, 32 for int32, 7 for int8 codes within onnxruntime's reduced range: a weight
    PaddleSlim scaled by its absolute maximum reaches +-127 in its largest channel, so only
    `reduce_weight_range` leaves a whole weight within [-64, 63]."""
    if codes.dtype == np.int8 and codes.size and REDUCED_LOW <= codes.min() and codes.max() <= REDUCED_HIGH:
        return 7
    return codes.dtype.itemsize * 8


def describe(model: onnx.ModelProto) -> IntegerGraph:
    """Every tensor of `model` that runs in integers, and every integer op (see the module's docstring).

    Raises:
        NotImplementedError: a QuantizeLinear or DequantizeLinear computes its scale or zero point at run time.
    """
    graph = model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    written = {node.output[0]: _grid(node, constants, np.dtype(np.uint8))  # codes -> the grid they are written on
               for node in graph.node if node.op_type == "QuantizeLinear"}
    read: dict[str, list[tuple[onnx.NodeProto, Grid]]] = {}  # codes -> its DequantizeLinears and their grids
    for node in graph.node:
        codes = node.input[0] if node.op_type == "DequantizeLinear" else ""
        if codes in written or codes in constants:
            dtype = written[codes].zero_point.dtype if codes in written else constants[codes].dtype
            read.setdefault(node.input[0], []).append((node, _grid(node, constants, dtype)))

    tensors = []
    for name in [*written, *(name for name in read if name not in written)]:
        dequantizers = read.get(name, [])
        grid = written[name] if name in written else dequantizers[0][1]
        source = producers[name].input[0] if name in written else ""
        tensors.append(IntegerTensor(
            name=name, grid=grid, bits=_bits(constants[name]) if name in constants else 8,
            initializer=name in constants,
            producer=_label(producers[source]) if source in producers else "",
            readers=tuple(dict.fromkeys(_label(reader) for node, _ in dequantizers
                                        for reader in readers.get(node.output[0], []))),
            read_grids=tuple(other for _, other in dequantizers if not other.same_as(grid))))

    dequantized = {node.output[0]: OpInput(node.input[0], grid) for dequantizers in read.values()
                   for node, grid in dequantizers}
    outputs = {output.name for output in graph.output}
    ops = []
    for node in graph.node:
        after = readers.get(node.output[0], []) if node.output else []
        inputs = [name for name in node.input if name]
        if (node.op_type in ("QuantizeLinear", "DequantizeLinear") or not inputs
                or not all(name in dequantized for name in inputs)
                or len(after) != 1 or after[0].op_type != "QuantizeLinear" or node.output[0] in outputs):
            continue
        op_inputs = tuple(dequantized[name] if name else None for name in node.input)
        ops.append(IntegerOp(node, op_inputs, after[0].output[0], written[after[0].output[0]],
                             {i.codes: constants[i.codes] for i in op_inputs if i is not None and i.codes in constants}))
    return IntegerGraph(tuple(tensors), tuple(ops))


def _attributes(node: onnx.NodeProto) -> dict:
    return {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, attributes: dict) -> np.ndarray:
    """A 2-D convolution (groups, strides, explicit pads, dilations), one kernel position at a time."""
    if x.ndim != 4 or attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError("simulate_op's Conv is 2-D with explicit pads")
    group, (stride_h, stride_w) = attributes.get("group", 1), attributes.get("strides", (1, 1))
    dilation_h, dilation_w = attributes.get("dilations", (1, 1))
    top, left, bottom, right = attributes.get("pads", (0, 0, 0, 0))
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))  # a real 0, as the QDQ graph pads
    batch, channels, height, width = x.shape
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    out_h = (height - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (width - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    x = x.reshape(batch, group, channels // group, height, width)
    weight = weight.reshape(group, out_channels // group, group_channels, kernel_h, kernel_w)
    out = np.zeros((batch, group, out_channels // group, out_h, out_w))
    for i in range(kernel_h):
        for j in range(kernel_w):
            rows = slice(i * dilation_h, i * dilation_h + stride_h * (out_h - 1) + 1, stride_h)
            columns = slice(j * dilation_w, j * dilation_w + stride_w * (out_w - 1) + 1, stride_w)
            out += np.einsum("ngchw,gmc->ngmhw", x[:, :, :, rows, columns], weight[:, :, :, i, j])
    out = out.reshape(batch, out_channels, out_h, out_w)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


# op type -> (inputs, attributes) -> float64 output, as the ONNX specification defines it: the integer ops of the
# lowered pattern nets, and a few more onnxruntime has integer kernels for
FLOAT_OPS = {
    "Conv": lambda v, a: _conv(v[0], v[1], v[2] if len(v) > 2 else None, a),
    "MatMul": lambda v, a: np.matmul(v[0], v[1]),
    "Add": lambda v, a: v[0] + v[1],
    "Mul": lambda v, a: v[0] * v[1],
    "Relu": lambda v, a: np.maximum(v[0], 0),
    "Sigmoid": lambda v, a: 1 / (1 + np.exp(-v[0])),
    "HardSigmoid": lambda v, a: np.clip(a.get("alpha", 0.2) * v[0] + a.get("beta", 0.5), 0, 1),
    "HardSwish": lambda v, a: v[0] * np.clip(v[0] / 6 + 0.5, 0, 1),
    "GlobalAveragePool": lambda v, a: v[0].mean(axis=tuple(range(2, v[0].ndim)), keepdims=True),
    "Concat": lambda v, a: np.concatenate(v, axis=a["axis"]),
}


def simulate_op(op: IntegerOp, integer_inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The output codes of `op` in QDQ semantics, in float64 numpy: dequantize each input (per channel where its
    grid is), run the float op, quantize (round half to even, saturate). `integer_inputs` maps the codes the op
    reads (`op.activation_inputs`) to their values; initializers' codes come from the op itself.

    An op type not in `FLOAT_OPS` (MaxPool, AveragePool...) runs in onnx's reference evaluator at the convert
    stage's opset 13, on the same float64 inputs.
    """
    values = [None if i is None else i.grid.dequantize(op.constants.get(i.codes, integer_inputs.get(i.codes)))
              for i in op.inputs]
    if op.op_type not in FLOAT_OPS:
        feeds = {name: value for name, value in zip(op.node.input, values) if name}
        return op.output_grid.quantize(_reference_node(op.node, {"": 13}).run(None, feeds)[0])
    return op.output_grid.quantize(FLOAT_OPS[op.op_type](values, _attributes(op.node)))


@dataclass(frozen=True)
class OpCheck:
    """One integer op: onnxruntime's output codes against `simulate_op` fed onnxruntime's input codes."""

    op: str
    op_type: str
    kernel: str  # the op onnxruntime ran (QLinearConv...; QuantizeLinear where it ran the float op unfused)
    elements: int
    max_code_difference: int
    share_off_by_more_than_one: float  # (dataclasses.asdict: a JSON-able record)


def _kernels(optimized: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """The op of onnxruntime's optimized graph that computes each name, through the Transposes of its NHWC layout."""
    producers = {output: node for node in optimized.graph.node for output in node.output}
    kernels = {}
    for name in names:
        node = producers[name]
        while node.op_type == "Transpose" and node.input[0] in producers:
            node = producers[node.input[0]]
        kernels[name] = node.op_type
    return kernels


def check_ops(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
              graph: IntegerGraph | None = None) -> list[OpCheck]:
    """Run `model` in onnxruntime (CPU, all graph optimizations: the kernels a deployment runs) with every integer
    op's input and output codes exposed, and compare each op's output codes with `simulate_op` fed onnxruntime's
    own input codes. `graph`: the description to hold the model to, by default its own; one described earlier
    (at convert time) checks that the file deployed still computes it, weights and grids included."""
    graph = describe(model) if graph is None else graph
    names = list(dict.fromkeys(name for op in graph.ops for name in (*op.activation_inputs, op.output)))
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {output.name for output in exposed.graph.output}
    exposed.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names if name not in present)
    with tempfile.TemporaryDirectory(prefix="quantgate-ops-") as scratch:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(scratch) / "optimized.onnx")
        options.log_severity_level = 3  # it warns that the saved graph is hardware specific; that is the point
        session = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
        kernels = _kernels(onnx.load(options.optimized_model_filepath), [op.output for op in graph.ops])
    codes = dict(zip(names, session.run(names, dict(feeds))))
    checks = []
    for op in graph.ops:
        difference = np.abs(simulate_op(op, codes).astype(np.int64) - codes[op.output].astype(np.int64))
        checks.append(OpCheck(op.name, op.op_type, kernels[op.output], int(difference.size),
                              int(difference.max(initial=0)), float((difference > 1).mean()) if difference.size else 0.0))
    return checks


def _reference_node(node: onnx.NodeProto, opsets: dict[str, int]) -> ReferenceEvaluator:
    """onnx's reference implementation of `node` at the model's opset (a bare NodeProto would get the newest)."""
    graph = onnx.helper.make_graph([node], node.name or node.output[0],
                                   [onnx.ValueInfoProto(name=name) for name in node.input if name],
                                   [onnx.ValueInfoProto(name=name) for name in node.output])
    return ReferenceEvaluator(graph, opsets=opsets)


def simulate_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """`model`'s outputs in QDQ semantics without onnxruntime: integer ops by `simulate_op`, the QuantizeLinear and
    DequantizeLinear nodes outside them by the same `Grid` arithmetic (onnx's reference evaluator implements them
    from opset 19 only), every other node by onnx's reference evaluator (see the module's docstring).

    Raises:
        NotImplementedError: an integer op's type is not in `FLOAT_OPS`, or a quantization's grid is computed.
    """
    graph = describe(model)
    by_output = {op.node.output[0]: op for op in graph.ops}
    simulated = {op.output for op in graph.ops}  # the QuantizeLinear each integer op's simulation includes
    opsets = {opset.domain: opset.version for opset in model.opset_import}
    values: dict[str, np.ndarray] = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    values.update(feeds)
    for node in model.graph.node:
        if node.output and node.output[0] in by_output:
            op = by_output[node.output[0]]
            values[op.output] = simulate_op(op, values)
        elif node.op_type == "QuantizeLinear" and node.output[0] not in simulated:
            values[node.output[0]] = _grid(node, values, np.dtype(np.uint8)).quantize(values[node.input[0]])
        elif node.op_type == "DequantizeLinear":
            codes = values[node.input[0]]
            values[node.output[0]] = _grid(node, values, codes.dtype).dequantize(codes).astype(np.float32)
        elif node.op_type != "QuantizeLinear":
            results = _reference_node(node, opsets).run(None, {name: values[name] for name in node.input if name})
            values.update(zip(node.output, results))
    return [values[output.name] for output in model.graph.output]
