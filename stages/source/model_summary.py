"""What a legacy-format Paddle inference program is: its inputs, outputs, ops and parameters, read from the
program itself (nothing here trusts a file name or a config)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from quantgate.int8.static_graph import load_program, op_counts, persistable_dtypes, static_mode

# Ops that only a quantized program holds: PaddleSlim's ONNX-style pair and the older fake-quant family.
QUANTIZE_OPS = ("quantize_linear", "dequantize_linear")
QUANTIZE_OP_PREFIXES = ("fake_quantize", "fake_dequantize", "fake_channel_wise", "moving_average_abs_max")
PROBABILITY_OPS = ("softmax", "sigmoid")  # a program ending in one of these outputs probabilities (a DB map: sigmoid)


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # -1 where the program leaves the size open
    dtype: str

    def as_record(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class ModelSummary:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    output_kind: str  # "probabilities" (the program ends in softmax or sigmoid) or "logits"
    ops: dict[str, int]
    parameters: int
    parameter_tensors: int
    parameter_dtypes: dict[str, str]
    measured_output_shape: tuple[int, ...] | None  # on one zero sample of the input shape given to `summarize`

    @property
    def quantized_ops(self) -> dict[str, int]:
        return {op: count for op, count in self.ops.items()
                if op in QUANTIZE_OPS or op.startswith(QUANTIZE_OP_PREFIXES)}

    @property
    def int8_parameters(self) -> list[str]:
        return sorted(name for name, dtype in self.parameter_dtypes.items() if dtype in ("int8", "uint8"))


def _spec(block, name: str) -> TensorSpec:
    var = block.var(name)
    return TensorSpec(name, tuple(int(size) for size in var.shape),
                      str(paddle.base.data_feeder.convert_dtype(var.dtype)))


def _producer(block, name: str) -> str | None:
    for op in reversed(block.ops):
        if name in op.output_arg_names:
            return op.type
    return None


def summarize(prefix: Path, sample_shape: tuple[int, ...] | None = None) -> ModelSummary:
    """Load `<prefix>.pdmodel/.pdiparams` and describe it; with `sample_shape` ([C, H, W]) also run one zero
    sample of that shape to measure the output's shape where the program leaves sizes open.

    Raises:
        RuntimeError, ValueError (Paddle's): the files are not a loadable inference program.
    """
    with static_mode():
        loaded = load_program(Path(prefix))
        block = loaded.program.global_block()
        inputs = tuple(_spec(block, name) for name in loaded.feeds)
        outputs = tuple(_spec(block, var.name) for var in loaded.fetches)
        dtypes = persistable_dtypes(loaded.program)
        sizes = {var.name: int(np.prod(var.shape)) for var in loaded.program.list_vars()
                 if var.persistable and var.name in dtypes}
        measured = None
        if sample_shape is not None and len(inputs) == 1 and len(outputs) >= 1:
            measured = tuple(loaded.run(np.zeros((1, *sample_shape), np.float32)).shape)
        kind = "probabilities" if outputs and _producer(block, outputs[0].name) in PROBABILITY_OPS else "logits"
        return ModelSummary(inputs, outputs, kind, op_counts(loaded.program), sum(sizes.values()), len(sizes),
                            dtypes, measured)
