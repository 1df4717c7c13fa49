"""The graph view affine absorption edits: readers, producers and scalar constants kept current as nodes go, and a
Q/DQ node's per-tensor grid read and rewritten."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

RANGES = {onnx.TensorProto.UINT8: (0, 255), onnx.TensorProto.INT8: (-128, 127)}  # a zero point type's codes


class AffineGraph:
    """Readers, producers and scalar constants of a graph, kept current as affines are removed."""

    def __init__(self, graph: onnx.GraphProto, nodes: list[onnx.NodeProto]):
        # `nodes` is the one list of node objects used throughout: protobuf may hand out a new Python
        # object on every access to graph.node, so identity is only meaningful within one list.
        self.graph = graph
        self.constants = {init.name: init for init in graph.initializer}
        self.outputs = {output.name for output in graph.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in nodes:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)

    def scalar(self, name: str) -> float | None:
        init = self.constants.get(name)
        if init is None:
            return None
        values = numpy_helper.to_array(init)
        return float(values.ravel()[0]) if values.size == 1 and values.dtype == np.float32 else None

    def only_reader(self, tensor: str) -> onnx.NodeProto | None:
        readers = self.readers.get(tensor, [])
        return readers[0] if len(readers) == 1 and tensor not in self.outputs else None

    def affine_operand(self, node: onnx.NodeProto, tensor: str) -> float | None:
        """The scalar constant `node` (Mul or Add) combines `tensor` with, or None."""
        if len(node.input) != 2 or tensor not in node.input:
            return None
        other = node.input[1] if node.input[0] == tensor else node.input[0]
        return self.scalar(other)

    def affine_after(self, tensor: str) -> tuple[list[onnx.NodeProto], float, float]:
        """The chain Mul(a)? -> Add(b)? reading `tensor` alone: its nodes, a and b."""
        chain, a, b = [], 1.0, 0.0
        reader = self.only_reader(tensor)
        if reader is not None and reader.op_type == "Mul" and (value := self.affine_operand(reader, tensor)) is not None:
            chain.append(reader)
            a, tensor = value, reader.output[0]
            reader = self.only_reader(tensor)
        if reader is not None and reader.op_type == "Add" and (value := self.affine_operand(reader, tensor)) is not None:
            chain.append(reader)
            b = value
        return chain, a, b

    def new_constant(self, like: str, values: np.ndarray, suffix: str) -> str:
        name = f"{like}_{suffix}"
        while name in self.constants:
            name += "_"
        init = numpy_helper.from_array(values, name)
        self.graph.initializer.append(init)
        self.constants[name] = init
        return name


def grid_of(graph: AffineGraph, node: onnx.NodeProto) -> tuple[float, int, int] | None:
    """A per-tensor Q/DQ node's scale, zero point and zero point type."""
    if len(node.input) < 3 or node.input[1] not in graph.constants or node.input[2] not in graph.constants:
        return None
    scale, zero_point = (numpy_helper.to_array(graph.constants[name]) for name in node.input[1:3])
    data_type = graph.constants[node.input[2]].data_type
    if scale.size != 1 or zero_point.size != 1 or data_type not in RANGES:
        return None
    return float(scale.ravel()[0]), int(zero_point.ravel()[0]), data_type


def set_grid(graph: AffineGraph, node: onnx.NodeProto, scale: float, zero_point: int, data_type: int) -> None:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    node.input[1] = graph.new_constant(node.input[1], np.array(scale, np.float32), "absorbed")
    node.input[2] = graph.new_constant(node.input[2], np.array(zero_point, dtype), "absorbed")


def rewire(graph: AffineGraph, old: str, new: str) -> None:
    for reader in graph.readers.pop(old, []):
        for index, name in enumerate(reader.input):
            if name == old:
                reader.input[index] = new
        graph.readers.setdefault(new, []).append(reader)


def drop_chain(graph: AffineGraph, chain: list[onnx.NodeProto], removed: set[int]) -> None:
    for node in chain:
        removed.add(id(node))
        for name in node.input:
            graph.readers[name] = [reader for reader in graph.readers.get(name, []) if reader is not node]
