"""paddle2onnx 2.x's FP32 graph of a PIR program, rewritten into the shapes paddle2onnx 1.3.1 writes.

The lowering's rewrites (affine absorption, integer HardSwish, scale propagation, float groups) and the Q/DQ
writer (`paddle2onnx_qdq`) match 1.3.1's graphs. 2.1.0 writes the same arithmetic differently (PP-OCRv4 rec's
PIR twin: 251 Identity nodes, 42 Reshapes of constants, `x * HardSigmoid(x)` for 28 HardSwish, every conv bias a
separate Add, Paddle's `scale` with its zero bias), so little there would match. `normalise` undoes exactly
those differences, each exact in float32 (PP-OCRv4 twin, PP-OCRv5 mobile rec and det: outputs bit-identical):

0. a Concat of rank-0 and rank-1 shape pieces (a PIR `builtin.combine` of scalars) reads the rank-0 ones through
   Unsqueeze: onnxruntime refuses to load 2.1.0's graph of the PP-OCRv4 twin without it;
1. Identity nodes go, one name surviving (`_bypass`): a decomposed Paddle op's output keeps its last node's name
   ("Add.179" for a layer_norm, as 1.3.1 names it, so the calibration restores no MatMul scale from it either),
   any other the Paddle op's (`p2o.pd_op.matmul.0.0`);
2. `Conv(x, W)` read only by `Add(., c)`, `c` one constant per output channel (2.x: the bias reshaped to
   [1, C, 1, 1]), becomes `Conv(x, W, b)` under the Add's output name, `b` keeping its name (`conv2d_157.b_0`);
3. shape plumbing on constants (FOLDED) is evaluated by onnx's reference evaluator into Constant nodes, and
   nodes nothing reads are dropped (2.x's unread Shape -> Slice chains);
4. `Mul(x, HardSigmoid(x))` with alpha 1/6, beta 0.5 (Paddle's hardswish) becomes `HardSwish(x)` under the Mul's
   name; an opset-13 graph is raised to 14 for it, as 1.3.1 does (of the ops that changed at 14 only the RNNs'
   `layout` could read differently: a graph holding one keeps its HardSigmoids);
5. `Add(x, 0)` (a one-element zero) and `Squeeze(Unsqueeze(x, axes), axes)` are x.

Decomposed LayerNorm is left alone: 1.3.1 decomposes it the same way. So is swish: 2.x writes `x * Sigmoid(x)`,
1.3.1 `x * Sigmoid(1.0 * x)`; both stay float, and on PP-OCRv4 the INT8 graphs lowered from either are equal.

    normalised = normalise(onnx.load(fp32_onnx))   # .model, .counts
    normalise_file(fp32_onnx, normalised_onnx)     # the counts; the file written atomically
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from quantgate.int8.errors import ConversionError
from quantgate.int8.onnx_ops import tensor_readers
from quantgate.int8.paddle2onnx_qdq import PADDLE2ONNX_NAME

HARDSWISH_OPSET = 14
HARD_SIGMOID_ALPHA, HARD_SIGMOID_BETA = 1 / 6, 0.5  # Paddle's hardswish: x * relu6(x + 3) / 6
ALPHA_TOLERANCE = 1e-6  # 2.x writes alpha as float32 (0.16666667)
# Ops whose semantics changed at opset 14 beyond added types: a graph with one is not raised from 13.
CHANGED_AT_14 = ("GRU", "LSTM", "RNN")
# 2.x's shape plumbing on constants; 1.3.1 keeps Casts of constants, so they stay.
FOLDED = ("Reshape", "Shape", "Slice", "Squeeze", "Unsqueeze", "Concat", "Gather", "Identity")


@dataclass(frozen=True)
class NormalisedGraph:
    """The rewritten model and how many of each rewrite it took."""

    model: onnx.ModelProto
    counts: dict[str, int] = field(default_factory=dict)


def normalise(model: onnx.ModelProto) -> NormalisedGraph:
    """paddle2onnx 2.x's FP32 graph in 1.3.1's shapes (module docstring); `model` is not changed.

    Raises:
        ConversionError: the rewritten graph fails onnx.checker (with shape inference where `model` passes it):
            a bug here; the message names the model.
    """
    full_check = _passes_full_check(model)  # 2.1.0's own graphs may not (PP-OCRv4 rec: Concat of rank 0 and 1)
    normalised = onnx.ModelProto()
    normalised.CopyFrom(model)
    graph = normalised.graph
    counts = {"scalars_unsqueezed_for_concat": _unsqueeze_scalars_for_concat(normalised),
              "identities_dropped": _drop_identities(graph)}
    constants = _constant_values(graph)
    counts["conv_biases_fused"] = _fuse_conv_biases(normalised, constants)
    counts["constants_folded"] = _fold_constants(normalised, constants)
    counts["dead_nodes_dropped"] = _drop_dead_nodes(graph)
    counts["hardswish_rebuilt"], counts["opset_raised_to"] = _rebuild_hardswish(normalised)
    counts["zero_adds_dropped"] = _drop_zero_adds(normalised, constants)  # ranks known once the rest is done
    _drop_unread_constants(graph)
    _drop_stale_value_info(graph)
    try:
        onnx.checker.check_model(normalised, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ConversionError(f"normalising {graph.name or 'the FP32 graph'} gave a graph that fails onnx.checker "
                              f"({exc}); convert without normalising and report the model") from exc
    return NormalisedGraph(normalised, counts)


def _passes_full_check(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False
    return True


def normalise_file(fp32_onnx: Path, out_onnx: Path) -> dict[str, int]:
    """`normalise` from one file to another (a temporary name in `out_onnx`'s folder, then renamed); the counts.

    Raises:
        ConversionError: as `normalise`.
    """
    normalised = normalise(onnx.load(str(fp32_onnx)))
    out_onnx = Path(out_onnx)
    out_onnx.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{out_onnx.name}-", dir=out_onnx.parent)
    os.close(handle)
    try:
        onnx.save(normalised.model, temporary)
        os.replace(temporary, out_onnx)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return normalised.counts


def _unsqueeze_scalars_for_concat(model: onnx.ModelProto) -> int:
    """Step 0 (module docstring): onnxruntime's "All inputs to Concat must have same rank"; Paddle concatenates
    the scalars as one-element lists."""
    graph, ranks = model.graph, _ranks(model)
    default = next((opset.version for opset in model.opset_import if opset.domain in ("", "ai.onnx")), 13)
    unsqueezed = 0
    for concat in [node for node in graph.node if node.op_type == "Concat"]:
        input_ranks = {ranks.get(name) for name in concat.input}
        if input_ranks != {0, 1}:
            continue
        position = list(graph.node).index(concat)
        for index, name in enumerate(concat.input):
            if ranks[name] != 0:
                continue
            vector = f"{name}.unsqueezed"
            if default >= 13:
                axes = f"{vector}.axes"
                nodes = [helper.make_node("Constant", [], [axes], value=numpy_helper.from_array(
                             np.array([0], np.int64), axes)),
                         helper.make_node("Unsqueeze", [name, axes], [vector], name=vector)]
            else:
                nodes = [helper.make_node("Unsqueeze", [name], [vector], name=vector, axes=[0])]
            for offset, node in enumerate(nodes):
                graph.node.insert(position + offset, node)
            position += len(nodes)
            concat.input[index] = vector
            unsqueezed += 1
    return unsqueezed


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for names in (node.input, node.output):
            for index, name in enumerate(names):
                if name == old:
                    names[index] = new


def _drop_identities(graph: onnx.GraphProto) -> int:
    """Step 1: each Identity goes, one of its two names surviving (`_bypass`); an Identity from a graph input to a
    graph output stays (it is the model)."""
    return sum(_bypass(graph, node, node.input[0]) for node in [node for node in graph.node
                                                                 if node.op_type == "Identity"])


def _constant_values(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Every Constant node's tensor and initializer, by name."""
    values = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            values[node.output[0]] = node.attribute[0].t
    return values


def _evaluate(node: onnx.NodeProto, arguments: list[np.ndarray], opsets) -> list[np.ndarray]:
    """`node` run by onnx's reference evaluator on constant `arguments`."""
    names = [f"in{index}" for index in range(len(arguments))]
    inputs = iter(names)
    single = onnx.NodeProto()
    single.CopyFrom(node)
    del single.input[:]
    single.input.extend(next(inputs) if name else "" for name in node.input)
    graph = helper.make_graph(
        [single], "constant", [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                             value.shape) for name, value in zip(names, arguments)],
        [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None) for name in node.output])
    evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=list(opsets)))
    return evaluator.run(None, dict(zip(names, arguments)))


def _channel_bias(opsets, constants: dict[str, onnx.TensorProto], producers: dict,
                  add_input: str, channels: int) -> tuple[np.ndarray, str] | None:
    """The per-channel bias an Add input holds, and the name to give it: the 1-D tensor a Reshape/Unsqueeze of a
    constant reads (the Paddle bias), else the Add input's own name. None: not constant or not per channel."""
    source, value = add_input, None
    producer = producers.get(add_input)
    if producer is not None and producer.op_type in ("Reshape", "Unsqueeze") and producer.input[0] in constants \
            and all(not name or name in constants for name in producer.input):
        source = producer.input[0]
        value = numpy_helper.to_array(constants[source])
    elif add_input in constants:
        value = numpy_helper.to_array(constants[add_input])
    if value is None or value.dtype != np.float32 or value.size != channels:
        return None
    if add_input in constants:
        shape = tuple(constants[add_input].dims)
    else:
        arguments = [numpy_helper.to_array(constants[name]) if name else None for name in producer.input]
        shape = _evaluate(producer, [a for a in arguments if a is not None], opsets)[0].shape
    if len(shape) < 3 or shape[-3] != channels or any(size != 1 for index, size in enumerate(shape)
                                                       if index != len(shape) - 3):
        return None  # broadcasts along another axis than NCHW's channels
    return value.reshape(channels), source


def _fuse_conv_biases(model: onnx.ModelProto, constants: dict[str, onnx.TensorProto]) -> int:
    """Step 2 (module docstring); the number of Conv + Add pairs fused."""
    graph = model.graph
    readers, outputs = tensor_readers(graph), {value.name for value in graph.output}
    producers = {name: node for node in graph.node for name in node.output}
    fused = 0
    for conv in [node for node in graph.node if node.op_type == "Conv" and len(node.input) == 2]:
        weight = constants.get(conv.input[1])
        conv_readers = readers.get(conv.output[0], [])
        if weight is None or conv.output[0] in outputs or len(conv_readers) != 1 \
                or conv_readers[0].op_type != "Add":
            continue
        add = conv_readers[0]
        other = add.input[1] if add.input[0] == conv.output[0] else add.input[0]
        found = _channel_bias(model.opset_import, constants, producers, other, int(weight.dims[0]))
        if found is None or other == conv.output[0]:
            continue
        bias, name = found
        if name in {value.name for value in graph.output} or name in {value.name for value in graph.input}:
            continue
        if name not in constants or tuple(constants[name].dims) != bias.shape:
            name = f"{other}.bias"
            tensor = numpy_helper.from_array(bias, name)
            graph.node.insert(list(graph.node).index(conv), helper.make_node("Constant", [], [name], value=tensor))
            constants[name] = tensor
        conv.input.append(name)
        conv.output[0] = add.output[0]
        graph.node.remove(add)
        fused += 1
    return fused


def _fold_constants(model: onnx.ModelProto, constants: dict[str, onnx.TensorProto]) -> int:
    """Step 3: each node whose inputs are all constant becomes Constant nodes of its outputs' names."""
    graph = model.graph
    outputs = {value.name for value in graph.output}
    folded = 0
    for index, node in enumerate(list(graph.node)):
        if node.op_type not in FOLDED or node.domain not in ("", "ai.onnx") or not node.input \
                or not all(not name or name in constants for name in node.input) \
                or any(name in outputs for name in node.output):
            continue
        arguments = [numpy_helper.to_array(constants[name]) for name in node.input if name]
        values = _evaluate(node, arguments, model.opset_import)
        position = list(graph.node).index(node)
        graph.node.remove(node)
        for offset, (name, value) in enumerate(zip(node.output, values)):
            tensor = numpy_helper.from_array(np.asarray(value), name)
            constants[name] = tensor
            graph.node.insert(position + offset, helper.make_node("Constant", [], [name], value=tensor))
        folded += 1
    return folded


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Each tensor's rank where onnx's shape inference (not strict) or the constants know it."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {value.name: len(value.type.tensor_type.shape.dim) for value in
             (*inferred.value_info, *inferred.input, *inferred.output)
             if value.type.tensor_type.HasField("shape")}
    ranks.update({init.name: len(init.dims) for init in model.graph.initializer})
    ranks.update({node.output[0]: len(node.attribute[0].t.dims) for node in model.graph.node
                  if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"})
    return ranks


def _bypass(graph: onnx.GraphProto, node: onnx.NodeProto, source: str) -> bool:
    """Remove `node`, whose output equals its input `source`, keeping one name for both. Graph inputs, outputs and
    initializers keep theirs; so does a name 2.x gave a node inside a decomposed Paddle op ("Add.5": 1.3.1 names
    those tensors so, and the calibration keeps no program scale under such a name); otherwise the node's output
    (the Paddle op's value) names it. False, nothing done, when both names must stay."""
    keep = {value.name for value in (*graph.input, *graph.output)} | {init.name for init in graph.initializer}
    target = node.output[0]
    if (source in keep or PADDLE2ONNX_NAME.fullmatch(source)) and target not in keep:
        graph.node.remove(node)
        _rename(graph, target, source)
    elif source not in keep:
        graph.node.remove(node)
        _rename(graph, source, target)
    else:
        return False
    return True


def _drop_zero_adds(model: onnx.ModelProto, constants: dict[str, onnx.TensorProto]) -> int:
    """Step 5, until nothing is left: shape inference may know x's rank (the zero must not widen it) only once a
    pair is gone."""
    dropped = once = _drop_zero_adds_once(model, constants)
    while once:
        once = _drop_zero_adds_once(model, constants)
        dropped += once
    return dropped


def _drop_zero_adds_once(model: onnx.ModelProto, constants: dict[str, onnx.TensorProto]) -> int:
    graph, ranks = model.graph, _ranks(model)
    dropped = 0
    for add in [node for node in graph.node if node.op_type == "Add"]:
        for x, zero in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
            value = numpy_helper.to_array(constants[zero]) if zero in constants else None
            if value is not None and x not in constants and value.size == 1 and value.item() == 0 \
                    and ranks.get(x, -1) >= value.ndim and _bypass(graph, add, x):
                dropped += 1
                break
    producers = {name: node for node in graph.node for name in node.output}
    for squeeze in [node for node in graph.node if node.op_type == "Squeeze" and len(node.input) == 2]:
        unsqueeze = producers.get(squeeze.input[0])
        if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or len(unsqueeze.input) != 2 \
                or sum(unsqueeze.output[0] in node.input for node in graph.node) != 1 \
                or any(name not in constants for name in (unsqueeze.input[1], squeeze.input[1])) \
                or not np.array_equal(numpy_helper.to_array(constants[unsqueeze.input[1]]),
                                      numpy_helper.to_array(constants[squeeze.input[1]])):
            continue
        if _bypass(graph, squeeze, unsqueeze.output[0]):
            graph.node.remove(unsqueeze)
            _rename(graph, unsqueeze.output[0], unsqueeze.input[0])
            dropped += 1
    return dropped


def _drop_dead_nodes(graph: onnx.GraphProto) -> int:
    """Step 3: nodes (Constants go last) none of whose outputs is read or a graph output."""
    dropped = 0
    while True:
        read = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
        dead = [node for node in graph.node if node.op_type != "Constant" and not any(name in read
                                                                                       for name in node.output)]
        if not dead:
            return dropped
        for node in dead:
            graph.node.remove(node)
        dropped += len(dead)


def _is_paddle_hard_sigmoid(node: onnx.NodeProto) -> bool:
    attributes = {attribute.name: attribute.f for attribute in node.attribute}
    return node.op_type == "HardSigmoid" \
        and abs(attributes.get("alpha", 0.2) - HARD_SIGMOID_ALPHA) <= ALPHA_TOLERANCE \
        and abs(attributes.get("beta", 0.5) - HARD_SIGMOID_BETA) <= ALPHA_TOLERANCE


def _rebuild_hardswish(model: onnx.ModelProto) -> tuple[int, int | None]:
    """Step 4: how many HardSwish were rebuilt, and the opset raised to (None: not raised)."""
    graph = model.graph
    default = next((opset for opset in model.opset_import if opset.domain in ("", "ai.onnx")), None)
    if default is None or (default.version < HARDSWISH_OPSET
                           and any(node.op_type in CHANGED_AT_14 for node in graph.node)):
        return 0, None
    readers, outputs = tensor_readers(graph), {value.name for value in graph.output}
    producers = {name: node for node in graph.node for name in node.output}
    rebuilt = 0
    for mul in [node for node in graph.node if node.op_type == "Mul"]:
        for gate_input, x in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0])):
            gate = producers.get(gate_input)
            if gate is not None and _is_paddle_hard_sigmoid(gate) and gate.input[0] == x \
                    and len(readers.get(gate_input, [])) == 1 and gate_input not in outputs:
                hardswish = helper.make_node("HardSwish", [x], [mul.output[0]], name=mul.name or None)
                graph.node.insert(list(graph.node).index(mul), hardswish)
                graph.node.remove(mul)
                graph.node.remove(gate)
                rebuilt += 1
                break
    raised = None
    if rebuilt and default.version < HARDSWISH_OPSET:
        default.version, raised = HARDSWISH_OPSET, HARDSWISH_OPSET
    return rebuilt, raised


def _drop_unread_constants(graph: onnx.GraphProto) -> None:
    read = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
    for node in [node for node in graph.node if node.op_type == "Constant" and node.output[0] not in read]:
        graph.node.remove(node)
    for init in [init for init in graph.initializer if init.name not in read]:
        graph.initializer.remove(init)


def _drop_stale_value_info(graph: onnx.GraphProto) -> None:
    present = {name for node in graph.node for name in node.output}
    for value in [value for value in graph.value_info if value.name not in present]:
        graph.value_info.remove(value)
