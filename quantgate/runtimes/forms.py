"""Which model each runtime runs, and one way to run any of them: `open_runner(...)(images) -> logits`.

Each runtime gets the form it runs fastest and really in INT8 (measurements in the module docstrings):
  onnxruntime       convert's fp32.onnx and int8.onnx (QDQ, int8 weights; fused into QLinearConv)
  openvino          the same two files, compiled with a static input shape, precision pinned to f32
  paddle_inference  export's FP32 program and quantize's PaddleSlim INT8 program, oneDNN (INT8 passes on)

A runtime may be "not applicable" to a model (`not_applicable_runtimes`): Paddle Inference to a PIR program, whose
INT8 model quantgate calibrated on the ONNX graph and which has no Paddle INT8 program to run.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from quantgate.errors import BadInput, StageError
from quantgate.stages.evaluate.outputs import ONNXRUNTIME, OPENVINO, PADDLE_INFERENCE, RUNTIME_NAMES
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE, PIR_MODEL_FILE

PADDLE2ONNX_INT8 = "paddle2onnx_int8"  # paddle2onnx's own INT8 model in onnxruntime, reported beside for comparison
# The Python package each runtime needs, and how to get it.
PACKAGES = {ONNXRUNTIME: ("onnxruntime", "it is a dependency of quantgate: reinstall quantgate"),
            OPENVINO: ("openvino", "pip install -e '.[openvino]' (or pip install openvino==2026.4.1)"),
            PADDLE_INFERENCE: ("paddle", "it is a dependency of quantgate: reinstall quantgate")}


class RuntimeUnavailable(StageError, BadInput):
    """evaluate.runtimes lists a runtime whose package is not installed, or whose models were not given."""


class RuntimeCannotRun(StageError, BadInput):
    """A runtime fails to run a model (an op it cannot execute, named); it never falls back to another runtime."""


class RuntimeNotApplicable(RuntimeUnavailable):
    """A runtime cannot judge this model's INT8 at all (Paddle Inference and a PIR program): not a fault to fix."""


@dataclass(frozen=True)
class ModelForm:
    """One model as a runtime loads it: an ONNX file, or a folder with a Paddle program and its parameters."""

    path: Path
    int8: bool
    description: str  # what the manifest shows as the runtime's fp32_model / int8_model
    stage: str  # the stage folder the files come from

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path / MODEL_FILE, self.path / PARAMS_FILE) if self.path.is_dir() else (self.path,)

    @property
    def bytes(self) -> int:
        return sum(file.stat().st_size for file in self.files)

    def source(self) -> dict:
        """{"stage", "files"}: where a bundle finds this model."""
        return {"stage": self.stage, "files": [file.name for file in self.files]}


class Runner(Protocol):
    form: ModelForm

    def __call__(self, images: np.ndarray) -> np.ndarray: ...

    def int8_ops(self) -> dict: ...


def check_runtimes(runtimes: tuple[str, ...]) -> None:
    """Fail before any work when a listed runtime cannot be imported.

    Raises:
        RuntimeUnavailable: a runtime is unknown or its package is missing; the message says how to install it.
    """
    problems = []
    for runtime in runtimes:
        if runtime not in PACKAGES:
            problems.append(f"{runtime!r} is not a runtime (choose from {', '.join(RUNTIME_NAMES)})")
        elif importlib.util.find_spec(PACKAGES[runtime][0]) is None:
            problems.append(f"{runtime} needs the Python package {PACKAGES[runtime][0]}, which is not installed: "
                            f"{PACKAGES[runtime][1]}")
    if problems:
        raise RuntimeUnavailable("evaluate.runtimes cannot be evaluated here: " + "; ".join(problems))


def not_applicable_runtimes(runtimes: tuple[str, ...], paddle_fp32_dir: Path | None) -> dict[str, str]:
    """{runtime: why} for each listed runtime that cannot judge this model's INT8 at all: paddle_inference when the
    export folder holds a PIR program (inference.json)."""
    if PADDLE_INFERENCE not in runtimes or paddle_fp32_dir is None \
            or not (Path(paddle_fp32_dir) / PIR_MODEL_FILE).is_file():
        return {}
    return {PADDLE_INFERENCE: (
        "the model is a PIR program (inference.json): its INT8 model was calibrated by quantgate on the ONNX graph, "
        "since PaddleSlim reads no PIR program, so there is no Paddle INT8 program for Paddle Inference to run; its "
        "FP32 program ran in Paddle Inference when the export stage checked the FP32 ONNX model against it. Judge "
        "the INT8 model in onnxruntime or openvino")}


def model_forms(runtimes: tuple[str, ...], fp32_onnx: Path, int8_onnx: Path, paddle_fp32_dir: Path | None,
                paddle_int8_dir: Path | None, paddle2onnx_int8_onnx: Path | None = None
                ) -> dict[str, dict[str, ModelForm]]:
    """{runtime: {"fp32": form, "int8": form}} for every listed runtime; onnxruntime also runs paddle2onnx's own
    INT8 model (PADDLE2ONNX_INT8, the same PaddleSlim scales before lowering) beside, for comparison, when given.
    The caller leaves out the runtimes `not_applicable_runtimes` names (the evaluate stage records why).

    Raises:
        RuntimeUnavailable: paddle_inference is listed but the Paddle model folders were not given.
        RuntimeNotApplicable: a listed runtime is not applicable to the model (why is said).
    """
    fp32_onnx, int8_onnx = Path(fp32_onnx), Path(int8_onnx)
    inapplicable = not_applicable_runtimes(runtimes, paddle_fp32_dir)
    if inapplicable:
        raise RuntimeNotApplicable("; ".join(f"{runtime} is not applicable: {why}"
                                             for runtime, why in inapplicable.items()))
    forms = {}
    for runtime in runtimes:
        if runtime == ONNXRUNTIME:
            forms[runtime] = {"fp32": ModelForm(fp32_onnx, False, fp32_onnx.name, "convert"),
                              "int8": ModelForm(int8_onnx, True, f"{int8_onnx.name} (QDQ, int8 weights; "
                                                "QLinearConv after onnxruntime's fusions)", "convert")}
            if paddle2onnx_int8_onnx is not None:
                forms[runtime][PADDLE2ONNX_INT8] = ModelForm(Path(paddle2onnx_int8_onnx), True,
                                                             Path(paddle2onnx_int8_onnx).name, "convert")
        elif runtime == OPENVINO:
            forms[runtime] = {"fp32": ModelForm(fp32_onnx, False, f"{fp32_onnx.name} (f32, static shape)", "convert"),
                              "int8": ModelForm(int8_onnx, True, f"{int8_onnx.name} (QDQ with PaddleSlim's scales, "
                                                "int8 weights; static shape, f32 elsewhere)", "convert")}
        elif runtime == PADDLE_INFERENCE:
            if paddle_fp32_dir is None or paddle_int8_dir is None:
                raise RuntimeUnavailable("evaluate.runtimes lists paddle_inference, but the evaluate stage was not "
                                         "given the export and quantize folders (paddle_fp32_dir, paddle_int8_dir)")
            forms[runtime] = {"fp32": ModelForm(Path(paddle_fp32_dir), False, "export's FP32 program (oneDNN FP32)",
                                                "export"),
                              "int8": ModelForm(Path(paddle_int8_dir), True, "quantize's PaddleSlim INT8 program "
                                                "(oneDNN INT8)", "quantize")}
    return forms


# The module that runs each runtime; each defines `Runner(form, threads, batch_shape)` and `library()`.
MODULES = {ONNXRUNTIME: "runtime_onnxruntime", OPENVINO: "runtime_openvino", PADDLE_INFERENCE: "runtime_paddle"}


def open_runner(runtime: str, form: ModelForm, threads: int, batch_shape: tuple[int, ...]) -> Runner:
    """`form` loaded into `runtime` on the CPU with `threads` threads; OpenVINO compiles for `batch_shape`.

    The runtime's library is imported here, so a process imports only the runtimes it runs.
    """
    return _module(runtime).Runner(form, threads, batch_shape)


def library(runtime: str) -> str:
    """"<name> <version>" of the library that runs `runtime`."""
    return _module(runtime).library()


def _module(runtime: str):
    if runtime not in MODULES:
        raise RuntimeUnavailable(f"{runtime!r} is not a runtime (choose from {', '.join(RUNTIME_NAMES)})")
    return importlib.import_module(f"quantgate.runtimes.{MODULES[runtime]}")
