"""Running a bundle's model in one runtime, exactly as the evaluate stage ran it when the gate judged it.

The evaluate stage's runners (`quantgate/runtimes/forms.py`) are the one place that says how each runtime
loads and runs a model (onnxruntime's session options, OpenVINO's static shape and f32 precision,
Paddle Inference's oneDNN INT8 passes); predict uses them too, with the batch shape and thread count the
evaluation recorded, so a bundle reproduces the stored predictions. Each library is imported only when
its runtime is asked for, so a machine needs only the one it uses.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quantgate.errors import BadInput

Engine = Callable[[np.ndarray], np.ndarray]


class RuntimeMissing(BadInput):
    """The runtime's library is not installed on this machine (exit 2)."""


def runtime_installed(runtime: str) -> bool:
    """Whether `runtime`'s Python package can be imported here (found by importlib.util.find_spec; nothing is
    imported). predict asks this before it loads a runtime, and when it picks one itself."""
    from quantgate.runtimes.forms import PACKAGES

    return importlib.util.find_spec(PACKAGES[runtime][0]) is not None


def missing_package(runtime: str) -> str:
    """What `runtime` needs that is missing here, and how to install it."""
    from quantgate.runtimes.forms import PACKAGES

    package, how = PACKAGES[runtime]
    return f"{runtime} needs the Python package {package}, which is not installed here: {how}"


def load_engine(runtime: str, files: list[Path], precision: str, threads: int,
                batch_shape: tuple[int, ...]) -> Engine:
    """The runner of `runtime` for the model in `files`: one ONNX file, or a Paddle program and its
    parameters (loaded from their folder). OpenVINO compiles for `batch_shape` and pads shorter batches.

    Raises:
        RuntimeMissing: the runtime's library is not installed here.
    """
    from quantgate.runtimes.forms import ModelForm, open_runner

    if not runtime_installed(runtime):
        raise RuntimeMissing(f"runtime {missing_package(runtime)}; or choose another of the bundle's runtimes with "
                             "--runtime")
    path = files[0] if len(files) == 1 else files[0].parent  # a Paddle program is loaded from its folder
    form = ModelForm(path, precision == "int8", f"{runtime} {precision} model of the bundle", "")
    return open_runner(runtime, form, threads, batch_shape)
