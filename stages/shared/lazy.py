"""Lazy names for a stage package's `__init__`, so that reading a stage's `OUTPUTS` stays cheap.

`quantgate versions` and the summary only need a stage's file names and metric keys; importing
the stage's entry function would load Paddle, PaddleSlim or onnxruntime (seconds, and their
start-up warnings). A package names its public objects and the module each lives in; the module
is imported on first use (PEP 562 module `__getattr__`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, homes: dict[str, str]) -> tuple[Callable[[str], object], list[str]]:
    """`__getattr__` and `__all__` for `package`, whose name N lives in the submodule `homes[N]` (or, for a name
    the stage takes from a library, in the module `homes[N]` spelled in full: `quantgate.samples.reading`)."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = homes[name] if homes[name].startswith("quantgate.") else f"{package}.{homes[name]}"
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)  # imported once; later lookups skip this function
        return value

    return __getattr__, sorted(["OUTPUTS", *homes])
