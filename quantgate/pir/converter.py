"""Where paddle2onnx 2.x lives: a folder of its own in the venv, since the pinned paddle2onnx 1.3.1 (PaddleSlim's
INT8 models) is the same distribution and one environment holds one version of it.

The folder is `<venv>/paddle2onnx-2` (`sys.prefix`: the venv quantgate runs from), or $QUANTGATE_PADDLE2ONNX2.
Only child processes import it (`children.run_child(..., converter=...)` puts it first on their path).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from quantgate.pir.errors import ConverterMissing

FOLDER_ENV = "QUANTGATE_PADDLE2ONNX2"
FOLDER_NAME = "paddle2onnx-2"
PIN = "paddle2onnx==2.1.0"  # pyproject.toml's [tool.quantgate] paddle2onnx2 says the same (tests check)
INSTALL_LINE = f".venv/bin/pip install --no-deps --target .venv/{FOLDER_NAME} {PIN}"  # README's first command


@dataclass(frozen=True)
class Converter:
    folder: Path
    version: str

    def record(self) -> dict:
        return {"name": "paddle2onnx", "version": self.version, "folder": str(self.folder), "pin": PIN}


def converter_folder() -> Path:
    return Path(os.environ.get(FOLDER_ENV) or Path(sys.prefix) / FOLDER_NAME).expanduser()


def find_converter() -> Converter:
    """paddle2onnx 2.x's folder and version (from its dist-info: nothing is imported here).

    Raises:
        ConverterMissing: the folder holds no paddle2onnx 2.x; the message gives the install line.
    """
    folder = converter_folder()
    infos = sorted(folder.glob("paddle2onnx-*.dist-info")) if folder.is_dir() else []
    versions = [info.name[len("paddle2onnx-"):-len(".dist-info")] for info in infos]
    where = f"${FOLDER_ENV}={folder}" if os.environ.get(FOLDER_ENV) else str(folder)
    if not (folder / "paddle2onnx" / "__init__.py").is_file() or len(versions) != 1:
        found = f"found paddle2onnx {', '.join(versions)}" if versions else "found no paddle2onnx"
        raise ConverterMissing(
            f"a PIR model (inference.json) is converted to ONNX by paddle2onnx 2.x, installed in a folder of its own "
            f"beside the pinned 1.3.1; {where} {found if folder.is_dir() else 'does not exist'}. Install it from "
            f"quantgate's folder (the README's first command does):\n  {INSTALL_LINE}\n"
            f"(in another venv: <venv>/bin/pip install --no-deps --target <venv>/{FOLDER_NAME} {PIN}, or set "
            f"{FOLDER_ENV} to the folder)")
    if not versions[0].startswith("2."):
        raise ConverterMissing(f"{where} holds paddle2onnx {versions[0]}, not 2.x, which reads PIR programs; "
                               f"reinstall it:\n  {INSTALL_LINE}")
    return Converter(folder, versions[0])


def converter_environment(export_metrics: dict) -> dict:
    """What decides a convert stage's output beyond the store's tracked libraries: a PIR export is converted by
    paddle2onnx 2.x from its own folder, which they do not see, so its version (nothing for a legacy export).

    Raises:
        ConverterMissing: a PIR export and no paddle2onnx 2.x.
    """
    from quantgate.stages.export.outputs import PROGRAM_FORMAT

    return {"paddle2onnx_pir": find_converter().version} if export_metrics.get(PROGRAM_FORMAT) == "pir" else {}
