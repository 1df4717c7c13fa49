"""Absorb the scalar affines of PP-LCNetV3-style backbones into the quantization grids beside them.

PP-LCNetV3 (PaddleOCR's PP-OCRv4 recognizer backbone) follows every convolution and every activation
with a learnable affine block, `y = a * x + b` with scalar `a` and `b`:

    QLinearConv -> DQ -> Mul(a1) -> Add(b1) -> HardSwish -> Mul(a2) -> Add(b2) -> Q -> QLinearConv

onnxruntime has no integer kernel for HardSwish, so that region runs in float, and four of its five
element-wise passes over the feature map are the affines: in the lowered PP-OCRv4 recognizer they were
more of onnxruntime's time than all its integer convolutions together. An affine next to a
quantization is a change of grid, so the lowering folds it into the grid instead of running it:

- after a convolution (Conv -> Q -> DQ -> affine): `b / a` joins the convolution's int32 bias, before the
  output is rounded, and `a` scales the output's grid, whose window moves with the values: exact up to the
  int32 bias;
- after any other DequantizeLinear (scale s, zero point z): `a * s * (q - z) + b = (a * s) * (q - z')` with
  `z' = z - b / (a * s)`, so the DequantizeLinear takes scale `a * s` and zero point `z'`;
- before a QuantizeLinear (scale S, zero point z): `q = round((a * x + b) / S) + z = round(x / (S / a) + z')`
  with `z' = z + b / S`, so the QuantizeLinear quantizes `x` with scale `S / a`.

In the last two, zero points are integers: `z'` is rounded, which shifts every value the same way, so
an affine qualifies only when `z'` lies within MAX_SHIFT_STEPS of an integer (the largest shift taken is
recorded as `max_zero_point_shift_steps`; the refused ones are named in `kept`); the step and the range
PaddleSlim calibrated are kept. Before a QuantizeLinear whose every reader dequantizes into a convolution
that does not pad, the shift is made up exactly instead: `S · (z' - round(z'))` times the sum of each
output channel's weights joins that convolution's int32 bias (`rounding_into_next_bias`). A padded
convolution reads the zero point at its border, where the correction would be wrong, so it does not qualify.
The scales are PaddleSlim's, re-expressed; nothing is calibrated here.

With `hardswish_grids` (off by default; `lower_int8(..., hardswish_grids=True)`), where neither holds and the
affine follows a HardSwish (`y = a * hardswish(x) + b`, the common case in front of PP-LCNetV3's padded
depthwise convolutions), `y`'s grid is rebuilt instead (`regridded`): HardSwish is at least -0.375, so `y`
never goes below `b - 0.375 a`, and PaddleSlim's symmetric int8 grid spends codes below that on nothing. The
new grid spans `[max(b - 0.375 a, PaddleSlim's low end), PaddleSlim's high end]` (and 0) with the step
`S' = |b| / k`, k the largest integer that still fits that span in 255 steps, so `b / S'` is an integer and
the zero point `z + b / S'` is exact: no offset, and a padded convolution reads zero at its border; the int32
biases of the convolutions reading `y` move to the new grid. The step is at most MAX_STEP_GROWTH coarser than
PaddleSlim's (on PP-OCRv4's recognizer it was 0.51-0.75 of it), the top of the range is PaddleSlim's; the
largest step ratio is recorded (`max_regrid_step_ratio`).
Only positive `a` qualifies (a scale is positive), only a chain whose every tensor has one reader, and only
while `z'` stays in the grid's integer range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from quantgate.int8.affine_graph import RANGES, AffineGraph, drop_chain, grid_of, rewire, set_grid
from quantgate.int8.onnx_ops import copied_node, drop_unused_initializers

# A rounded zero point shifts every value of the tensor the same way: unlike rounding noise, that offset adds up
# coherently in the convolution that reads it (on PP-OCRv4's recognizer, absorbing every affine whatever its
# shift cost up to 7 points of line accuracy). Only an affine whose zero point lands this close to an integer
# becomes a grid; after a convolution, the exact fold into its bias comes first.
MAX_SHIFT_STEPS = 0.05
# A rebuilt grid (after a HardSwish, see the module doc) may be at most this much coarser than PaddleSlim's.
MAX_STEP_GROWTH = 0.05
HARDSWISH_MIN = -0.375  # hardswish(x) = x * relu6(x + 3) / 6 is smallest at x = -1.5


@dataclass
class AbsorbedAffines:
    into_convolution: int = 0  # affines after a convolution: b/a into its bias, a into its output's grid (exact)
    after_dequantize: int = 0  # affines folded into the DequantizeLinear before them
    before_quantize: int = 0  # affines folded into the QuantizeLinear after them
    rounding_into_next_bias: int = 0  # of those, the zero point's rounding made up in the unpadded convs reading it
    regridded: int = 0  # of those, after a HardSwish: the output's grid rebuilt so its zero point is exact
    max_zero_point_shift_steps: float = 0.0
    max_regrid_step_ratio: float = 0.0  # the rebuilt grids' step over PaddleSlim's, at most 1 + MAX_STEP_GROWTH
    kept: list[str] = field(default_factory=list)  # affine nodes left as float ops, and why

    def as_metrics(self) -> dict:
        return {"into_convolution": self.into_convolution, "after_dequantize": self.after_dequantize,
                "before_quantize": self.before_quantize, "rounding_into_next_bias": self.rounding_into_next_bias,
                "regridded": self.regridded, "max_zero_point_shift_steps": round(self.max_zero_point_shift_steps, 4),
                "max_regrid_step_ratio": round(self.max_regrid_step_ratio, 4), "kept": self.kept}


def absorb_scalar_affines(model: onnx.ModelProto, hardswish_grids: bool = False) -> AbsorbedAffines:
    """Fold scalar Mul/Add chains into the per-tensor DequantizeLinear before or QuantizeLinear after them, in place;
    with `hardswish_grids`, an affine after a HardSwish that qualifies for neither gets a grid of its own."""
    nodes = list(model.graph.node)
    graph, result, removed = AffineGraph(model.graph, nodes), AbsorbedAffines(), set()
    producers = {output: node for node in nodes for output in node.output}
    for node in nodes:
        if id(node) in removed or node.op_type != "DequantizeLinear" or (grid := grid_of(graph, node)) is None:
            continue
        chain, a, b = graph.affine_after(node.output[0])
        if not chain:
            continue
        scale, zero_point, data_type = grid
        if a > 0 and _into_convolution(graph, node, a, b, producers):
            drop_chain(graph, chain, removed)
            rewire(graph, chain[-1].output[0], node.output[0])
            result.into_convolution += 1
            continue
        exact = zero_point - b / (a * scale)
        low, high = RANGES[data_type]
        if (reason := _refusal(a, exact, low, high)) is not None:
            result.kept.append(f"{chain[0].name}: {reason}")
            continue
        set_grid(graph, node, a * scale, int(round(exact)), data_type)
        drop_chain(graph, chain, removed)
        rewire(graph, chain[-1].output[0], node.output[0])
        result.after_dequantize += 1
        result.max_zero_point_shift_steps = max(result.max_zero_point_shift_steps, abs(exact - round(exact)))
    producers = {output: node for node in nodes if id(node) not in removed for output in node.output}
    for node in nodes:
        if id(node) in removed or node.op_type != "QuantizeLinear" or (grid := grid_of(graph, node)) is None:
            continue
        chain = _affine_before(graph, producers, node.input[0])
        if not chain:
            continue
        a, b = _coefficients(graph, chain)
        scale, zero_point, data_type = grid
        exact = zero_point + b / scale
        low, high = RANGES[data_type]
        reason = _refusal(a, exact, low, high)
        if reason is not None and a > 0 and low <= round(exact) <= high and \
                _rounding_into_convolutions(graph, producers, node, grid, scale * (exact - round(exact))):
            reason, exact = None, float(round(exact))  # the rounding is made up exactly downstream
            result.rounding_into_next_bias += 1
        source = next(name for name in chain[0].input if graph.scalar(name) is None)
        if reason is not None and a > 0 and hardswish_grids \
                and (regrid := _hardswish_regrid(graph, producers, node, source, a, b, grid)):
            reason, scale, exact, ratio = None, *regrid
            result.regridded += 1
            result.max_regrid_step_ratio = max(result.max_regrid_step_ratio, ratio)
        if reason is not None:
            result.kept.append(f"{chain[0].name}: {reason}")
            continue
        set_grid(graph, node, scale / a, int(round(exact)), data_type)
        drop_chain(graph, chain, removed)
        graph.readers.setdefault(source, []).append(node)
        node.input[0] = source
        result.before_quantize += 1
        result.max_zero_point_shift_steps = max(result.max_zero_point_shift_steps, abs(exact - round(exact)))
    kept = [copied_node(node) for node in nodes if id(node) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    drop_unused_initializers(model.graph)
    return result


def _into_convolution(graph: AffineGraph, dequantize: onnx.NodeProto, a: float, b: float,
                      producers: dict[str, onnx.NodeProto]) -> bool:
    """Fold `a * x + b` after Conv -> Q -> DQ into the convolution, exactly: b / a joins its int32 bias (before the
    output's rounding, so no offset is left), a scales the output grid, and the grid's window moves with the
    values (a zero point moves the window, it does not round values). False where the chain is not that."""
    quantize = producers.get(dequantize.input[0])
    if quantize is None or quantize.op_type != "QuantizeLinear" or graph.only_reader(quantize.output[0]) is not dequantize:
        return False
    conv = producers.get(quantize.input[0])
    if conv is None or conv.op_type != "Conv" or len(conv.input) < 3 or graph.only_reader(conv.output[0]) is not quantize:
        return False
    bias_dq = _own_int32_bias(graph, producers, conv)
    if bias_dq is None or len(bias_dq.input) > 2:
        return False
    grid = grid_of(graph, quantize)
    if grid is None or grid_of(graph, dequantize) != grid:
        return False
    scale, zero_point, data_type = grid
    bias = numpy_helper.to_array(graph.constants[bias_dq.input[0]]).astype(np.float64)
    bias_scale = numpy_helper.to_array(graph.constants[bias_dq.input[1]]).astype(np.float64)
    shifted = np.round(bias + (b / a) / bias_scale)
    if np.abs(shifted).max() >= 2**31:
        return False
    low, high = RANGES[data_type]
    window = int(np.clip(zero_point - round(b / a / scale), low, high))
    bias_dq.input[0] = graph.new_constant(bias_dq.input[0], shifted.astype(np.int32), "affine")
    set_grid(graph, quantize, scale, window, data_type)
    set_grid(graph, dequantize, a * scale, window, data_type)
    return True


def _rounding_into_convolutions(graph: AffineGraph, producers: dict[str, onnx.NodeProto], quantize: onnx.NodeProto,
                                grid: tuple, offset: float) -> bool:
    """Make up `offset` (what a rounded zero point takes off every value of `quantize`'s tensor, as its readers
    dequantize it) in the int32 bias of each convolution that reads it: exact where no convolution pads (a pad
    reads the zero point, which the offset would not reach), so only unpadded ones qualify, and every reader of
    the tensor must be one. False, changing nothing, where the readers are not that."""
    if quantize.output[0] in graph.outputs:
        return False
    updates = []
    for dequantize in graph.readers.get(quantize.output[0], []):
        if dequantize.op_type != "DequantizeLinear" or grid_of(graph, dequantize) != grid:
            return False
        for conv in graph.readers.get(dequantize.output[0], []):
            update = _bias_shift(graph, producers, conv, dequantize.output[0], offset)
            if update is None:
                return False
            updates.append(update)
    if not updates:
        return False
    for bias_dq, shifted in updates:
        bias_dq.input[0] = graph.new_constant(bias_dq.input[0], shifted, "rounding")
    return True


def _bias_shift(graph: AffineGraph, producers: dict[str, onnx.NodeProto], conv: onnx.NodeProto, tensor: str,
                offset: float):
    """(bias DequantizeLinear, new int32 bias) adding `offset` · Σ weights to an unpadded conv reading `tensor`."""
    attributes = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in conv.attribute}
    if conv.op_type != "Conv" or conv.input[0] != tensor or len(conv.input) < 3 or any(attributes.get("pads", [])) \
            or attributes.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID"):
        return None
    weight_dq, bias_dq = producers.get(conv.input[1]), _own_int32_bias(graph, producers, conv)
    if weight_dq is None or weight_dq.op_type != "DequantizeLinear" or bias_dq is None \
            or not all(name in graph.constants for name in weight_dq.input):
        return None
    values, scale, zero = (numpy_helper.to_array(graph.constants[name]).astype(np.float64) for name in weight_dq.input)
    shape = (-1,) + (1,) * (values.ndim - 1)
    weights = (values - zero.reshape(shape)) * scale.reshape(shape)
    bias = numpy_helper.to_array(graph.constants[bias_dq.input[0]]).astype(np.float64)
    bias_scale = numpy_helper.to_array(graph.constants[bias_dq.input[1]]).astype(np.float64)
    shifted = np.round(bias + offset * weights.reshape(len(weights), -1).sum(axis=1) / bias_scale)
    return None if np.abs(shifted).max() >= 2**31 else (bias_dq, shifted.astype(np.int32))


def _hardswish_regrid(graph: AffineGraph, producers: dict[str, onnx.NodeProto], quantize: onnx.NodeProto, source: str,
                      a: float, b: float, grid: tuple) -> tuple[float, float, float] | None:
    """For `a * hardswish(x) + b` quantized by `quantize`: (y's new step, the zero point x's grid then takes, new step
    over PaddleSlim's), with every DequantizeLinear reading `quantize` moved to y's new grid; None, changing
    nothing, where `source` is not a HardSwish, a reader is not such a DequantizeLinear, or no step fits."""
    hardswish = producers.get(source)
    if hardswish is None or hardswish.op_type != "HardSwish" or quantize.output[0] in graph.outputs or b == 0:
        return None
    readers = graph.readers.get(quantize.output[0], [])
    if not readers or any(reader.op_type != "DequantizeLinear" or grid_of(graph, reader) != grid for reader in readers):
        return None
    scale, zero_point, data_type = grid
    low, high = RANGES[data_type]
    # y's least value (or PaddleSlim's clip), and a grid always holds 0: a padded convolution reads it
    bottom = min(max(b + HARDSWISH_MIN * a, (low - zero_point) * scale), 0.0)
    top = (high - zero_point) * scale
    k = int(abs(b) * (high - low - 1) // (top - bottom))  # one step spare for the zero point's ceiling
    if k < 1:
        return None
    step = abs(b) / k
    y_zero = int(np.ceil(-bottom / step - 1e-6))
    x_zero = y_zero + round(b / step)
    if step > scale * (1 + MAX_STEP_GROWTH) or not low <= y_zero <= high or not low <= x_zero <= high \
            or (high - y_zero) * step < top * (1 - 1e-6):
        return None
    biases = [_rescaled_bias(graph, producers, conv, reader.output[0], step / scale)
              for reader in readers for conv in graph.readers.get(reader.output[0], []) if conv.op_type == "Conv"]
    if any(bias is None for bias in biases):
        return None
    for reader in readers:
        set_grid(graph, reader, step, y_zero, data_type)
    # a fused QLinearConv needs its bias on the x_scale * w_scale grid
    for bias_dq, values, bias_scale in filter(None, biases):
        bias_dq.input[0] = graph.new_constant(bias_dq.input[0], values, "regrid")
        bias_dq.input[1] = graph.new_constant(bias_dq.input[1], bias_scale, "regrid")
    return step, float(x_zero), step / scale


def _rescaled_bias(graph: AffineGraph, producers: dict[str, onnx.NodeProto], conv: onnx.NodeProto, tensor: str,
                   ratio: float):
    """(bias DequantizeLinear, int32 bias, its scale): `conv`'s bias on the grid of its input's scale times
    `ratio`; () for a conv without a bias; None where `conv` reads `tensor` as a weight or its bias is not an
    int32 of its own."""
    if conv.input[0] != tensor:
        return None
    if len(conv.input) < 3 or not conv.input[2]:
        return ()
    bias_dq = _own_int32_bias(graph, producers, conv)
    if bias_dq is None or len(bias_dq.input) > 2:
        return None
    values, scale = (numpy_helper.to_array(graph.constants[name]) for name in bias_dq.input[:2])
    new_scale = (scale.astype(np.float64) * ratio).astype(np.float32)
    rescaled = np.round(values.astype(np.float64) * scale / new_scale)
    return None if np.abs(rescaled).max() >= 2**31 else (bias_dq, rescaled.astype(np.int32), new_scale)


def _own_int32_bias(graph: AffineGraph, producers: dict[str, onnx.NodeProto], conv: onnx.NodeProto):
    """The DequantizeLinear of `conv`'s bias if it dequantizes constant int32 values read by `conv` alone, else None."""
    bias_dq = producers.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if bias_dq is None or bias_dq.op_type != "DequantizeLinear" \
            or not all(name in graph.constants for name in bias_dq.input) \
            or graph.constants[bias_dq.input[0]].data_type != onnx.TensorProto.INT32 \
            or len(graph.readers.get(bias_dq.output[0], [])) != 1:
        return None
    return bias_dq


def _refusal(a: float, zero_point: float, low: int, high: int) -> str | None:
    """Why an affine cannot become this grid, or None."""
    if a <= 0:
        return f"scale {a:.4g} not positive"
    if not low <= round(zero_point) <= high:
        return f"zero point {zero_point:.1f} outside the grid"
    if abs(zero_point - round(zero_point)) > MAX_SHIFT_STEPS:
        return f"zero point {zero_point:.3f} is {abs(zero_point - round(zero_point)):.3f} steps from an integer"
    return None


def _affine_before(graph: AffineGraph, producers: dict[str, onnx.NodeProto], tensor: str) -> list[onnx.NodeProto]:
    """The chain Mul(a)? -> Add(b)? that produces `tensor`, each output read by the next node alone."""
    chain: list[onnx.NodeProto] = []
    for op_type in ("Add", "Mul"):
        node = producers.get(tensor)
        if node is None or node.op_type != op_type or graph.only_reader(node.output[0]) is None:
            continue
        source = next((name for name in node.input if graph.scalar(name) is None), None)
        if source is None or graph.affine_operand(node, source) is None:
            continue
        chain.insert(0, node)
        tensor = source
    return chain


def _coefficients(graph: AffineGraph, chain: list[onnx.NodeProto]) -> tuple[float, float]:
    a, b = 1.0, 0.0
    for node in chain:
        value = next(graph.scalar(name) for name in node.input if graph.scalar(name) is not None)
        if node.op_type == "Mul":
            a, b = a * value, b * value
        else:
            b += value
    return a, b
