"""Recognising a PIR inference folder and reading what its program is from `<prefix>.json`, without Paddle.

A PIR program file is JSON whose `base_code.magic` is "pir" (what `paddle.jit.save` and `paddle.static.save_
inference_model` write under Paddle 3); its top block lists every op: `p` ops are the parameters, `1.data` the
inputs, `1.fetch` the outputs, each value carrying its dtype and shape.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from quantgate.errors import clipped
from quantgate.pir.errors import PirProblem

PROGRAM_SUFFIX = ".json"
PARAMS_SUFFIX = ".pdiparams"
SETTINGS_SUFFIX = ".yml"
PIR_MAGIC = "pir"
LISTED_CHARS = 300
# The dtype tags of PIR's serialised types ("0.t_f32") in numpy's words.
DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8", "ui8": "uint8",
          "i16": "int16", "i32": "int32", "i64": "int64", "bool": "bool"}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # -1 where the program leaves the size open
    dtype: str


@dataclass(frozen=True)
class ProgramFacts:
    """What a PIR program declares: its inputs and outputs, op histogram (Paddle's op names) and parameters."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    ops: dict[str, int]
    parameter_dtypes: dict[str, str]
    parameters: int  # numbers stored, over every parameter tensor
    output_ops: tuple[str, ...]  # the op that produces each output (softmax, sigmoid, ...)


def is_pir_program(path: Path) -> bool:
    """True when `path` is a PIR program file (JSON with base_code.magic "pir")."""
    try:
        with open(path, encoding="utf-8") as stream:
            head = json.load(stream)
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and isinstance(head.get("base_code"), dict) \
        and head["base_code"].get("magic") == PIR_MAGIC and isinstance(head.get("program"), dict)


def require_pir_program(path: Path) -> dict:
    """The parsed program of `path`.

    Raises:
        PirProblem: `path` is not JSON, or JSON that is not a PIR program (a config, a tokenizer, ...).
    """
    try:
        program = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PirProblem(f"{path} is not a PIR program: it cannot be read as JSON ({type(exc).__name__}: "
                         f"{clipped(str(exc), LISTED_CHARS)}); point trained_model.path at the folder "
                         "paddle.jit.save (Paddle 3) or PaddleOCR/PaddleX's export wrote") from exc
    if not (isinstance(program, dict) and isinstance(program.get("base_code"), dict)
            and program["base_code"].get("magic") == PIR_MAGIC and isinstance(program.get("program"), dict)):
        keys = ", ".join(sorted(program)[:8]) if isinstance(program, dict) else type(program).__name__
        raise PirProblem(f"{path} is JSON but not a PIR program (no base_code.magic 'pir'; top-level: "
                         f"{clipped(keys, LISTED_CHARS)}); a PIR inference model's program is the <prefix>.json "
                         "paddle.jit.save writes beside <prefix>.pdiparams: set trained_model.prefix to its stem")
    return program


def _type(value: dict) -> tuple[str, tuple[int, ...]]:
    tag, shape = value["TT"]["D"][0]["#"], value["TT"]["D"][1]
    return DTYPES.get(tag.split(".t_")[-1], tag), tuple(int(size) for size in shape)


def _attribute(op: dict, name: str):
    return next((entry["AT"]["D"] for entry in op.get("A", []) if isinstance(entry, dict) and entry.get("N") == name),
                None)


def program_ops(program: dict) -> list[dict]:
    return program["program"]["regions"][0]["blocks"][0]["ops"]


def program_facts(program: dict) -> ProgramFacts:
    """Inputs, outputs, ops and parameters of a parsed PIR program (`require_pir_program`)."""
    values, producers, inputs, fetched, ops, dtypes, parameters = {}, {}, [], [], Counter(), {}, 0
    for op in program_ops(program):
        kind, outputs = op["#"], op.get("O", [])
        for value in outputs if isinstance(outputs, list) else [outputs]:
            # dense tensors only: a vector of tensors (combine ops) holds types, not a shape
            if isinstance(value, dict) and str(value.get("TT", {}).get("#", "")).endswith("t_dtensor"):
                values[value["%"]] = _type(value)
                producers[value["%"]] = kind.split(".", 1)[-1]
        if kind == "p":
            dtype, shape = _type(op["O"])
            dtypes[op["A"][3]] = dtype
            size = 1
            for side in shape:
                size *= max(side, 0)
            parameters += size
            continue
        name = kind.split(".", 1)[-1]
        ops[name] += 1
        if name in ("data", "feed"):  # jit.save writes data ops; paddle.pir.translate_to_pir keeps feed ops
            dtype, shape = _type(outputs[0])
            inputs.append(Tensor(_attribute(op, "name"), shape, dtype))
        elif name == "fetch":
            fetched.append((_attribute(op, "name"), op["I"][0]["%"]))
    outputs = tuple(Tensor(name, values[source][1], values[source][0]) for name, source in fetched)
    return ProgramFacts(tuple(inputs), outputs, dict(sorted(ops.items())), dtypes, parameters,
                        tuple(producers[source] for _, source in fetched))


@dataclass(frozen=True)
class PirFolder:
    folder: Path
    prefix: str

    @property
    def program(self) -> Path:
        return self.folder / f"{self.prefix}{PROGRAM_SUFFIX}"

    @property
    def params(self) -> Path:
        return self.folder / f"{self.prefix}{PARAMS_SUFFIX}"

    @property
    def settings(self) -> Path | None:
        """`<prefix>.yml` (PaddleOCR 3 and PaddleX 3 write `inference.yml`), None where there is none."""
        path = self.folder / f"{self.prefix}{SETTINGS_SUFFIX}"
        return path if path.is_file() else None


def find_pir_folder(folder: Path, prefix: str) -> PirFolder | None:
    """The PIR model in `folder` (its `<prefix>.json` is a PIR program, its `<prefix>.pdiparams` is there); None
    where there is no `<prefix>.json` at all.

    Raises:
        PirProblem: `<prefix>.json` is not a PIR program, or its parameters file is missing.
    """
    found = PirFolder(Path(folder), prefix)
    if not found.program.is_file():
        return None
    require_pir_program(found.program)
    if not found.params.is_file():
        raise PirProblem(f"{found.program} is a PIR program but {found.params.name} is not beside it; copy the whole "
                         "folder the export wrote (the program and its parameters)")
    return found
