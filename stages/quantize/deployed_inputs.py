"""The inputs AdaRound fits each layer on, taken from the graph that runs: the lowered INT8 ONNX model.

PaddleSlim's program puts each conv/matmul input on its grid, and that is all. The lowering then gives the
affines after HardSwish grids of their own (`convert.hardswish_grids`), absorbs affines into grids and runs
HardSwish as integer Add and Mul: each a rounding the program does not have. Codes fitted on the program's inputs
are the best ones for a graph that never runs, and every later rounding re-rolls them. Here the INT8 program is
lowered once, exactly as the convert stage will lower it (`Lowering`: weight bits and HardSwish grids), and each
layer's input is what that model feeds it in onnxruntime, with the integer kernels a deployment runs (every
kernel within 1 code of the QDQ arithmetic: `quantgate.int8.integer_graph`) and every layer before it refitted:
a layer's new codes are written into the model's int8 weight before the next layer's input is computed.

A layer is found in the lowered model by its codes: the int8 weight of a Conv or MatMul whose codes are the
program's (halved, where the lowering keeps 7-bit weights in 7 bits). A layer not found there (a weight the
lowering left float, codes it changed) is fitted on the program's input instead, and the record says which.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from quantgate.int8.lower_int8 import Lowering
from quantgate.int8.static_graph import LoadedProgram
from quantgate.stages.export.outputs import MODEL_FILE
from quantgate.stages.quantize.layer_sensitivity import lowered_model
from quantgate.stages.quantize.quantized_weights import Layer

FROM_DEPLOYED, FROM_PROGRAM = "lowered model", "PaddleSlim program"


class DeployedInputs:
    """The lowered INT8 model of a PaddleSlim program, whose weights follow AdaRound's refits layer by layer."""

    def __init__(self, model: onnx.ModelProto, threads: int = 2):
        self.model, self.threads = model, threads
        self.input_name = model.graph.input[0].name
        initializers = {init.name: init for init in model.graph.initializer}
        producers = {output: node for node in model.graph.node for output in node.output}
        # int8 weight initializer -> the activation its Conv/MatMul reads
        self._reads: dict[str, str] = {}
        for node in model.graph.node:
            if node.op_type not in ("Conv", "MatMul") or len(node.input) < 2:
                continue
            dequantize = producers.get(node.input[1])
            if dequantize is None or dequantize.op_type != "DequantizeLinear":
                continue
            weight = initializers.get(dequantize.input[0])
            if weight is not None and weight.data_type == onnx.TensorProto.INT8:
                self._reads[weight.name] = node.input[0]
        self._initializers = initializers
        self._codes = {name: numpy_helper.to_array(initializers[name]) for name in self._reads}
        self._found: dict[str, tuple[str, int]] = {}  # layer codes' name -> (initializer, program codes per code)

    @classmethod
    def lowered(cls, program: LoadedProgram, lowering: Lowering, save) -> "DeployedInputs":
        """`program` (static mode, its scope as it stands) saved with `save(program, prefix)`, converted by
        paddle2onnx and lowered by `lowering`, as the convert stage does."""
        with tempfile.TemporaryDirectory(prefix="quantgate-deployed-") as scratch:
            save(program, str(Path(scratch) / Path(MODEL_FILE).stem))
            lowered_model(Path(scratch), Path(scratch) / "int8.onnx", lowering)
            return cls(onnx.load(str(Path(scratch) / "int8.onnx")))

    def find(self, layer: Layer, codes: np.ndarray) -> bool:
        """Whether `layer`'s weight is in the lowered model as these program `codes` (once: later calls remember)."""
        if layer.codes in self._found:
            return True
        matches = [(name, factor) for name, onnx_codes in self._codes.items() if onnx_codes.shape == codes.shape
                   for factor in (1, 2) if np.array_equal(onnx_codes.astype(np.int32) * factor, codes.astype(np.int32))]
        if len({name for name, _ in matches}) != 1:
            return False
        self._found[layer.codes] = matches[0]
        return True

    def inputs(self, layer: Layer, images: list[np.ndarray]) -> np.ndarray:
        """What the lowered model, as it stands, feeds `layer` on every batch of `images` (`find` it first)."""
        name = self._reads[self._found[layer.codes][0]]
        exposed = onnx.ModelProto()
        exposed.CopyFrom(self.model)
        exposed.graph.output.extend([onnx.ValueInfoProto(name=name)])
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.log_severity_level = self.threads, 3
        session = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return np.concatenate([session.run([name], {self.input_name: batch})[0] for batch in images])

    def update(self, layer: Layer, codes: np.ndarray) -> None:
        """Write `layer`'s new program codes into its int8 weight."""
        name, factor = self._found[layer.codes]
        new = (np.asarray(codes).astype(np.int32) // factor).astype(np.int8)
        self._initializers[name].CopyFrom(numpy_helper.from_array(new, name))
        self._codes[name] = new
