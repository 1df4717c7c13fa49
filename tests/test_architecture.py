"""The house keeps its shape: the import contracts of `.importlinter` hold, they would catch a stage reaching into
another (or a library into a stage), and no module of the package grows past 400 lines.

import-linter reads the package from disk by its import names; flows/, stages/ and artifacts/ live at the top of
the repository but install as quantgate.flows, quantgate.stages and quantgate.artifacts, so the tests lay a copy out
as the names say (sources only: nothing is imported or run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONTRACTS = REPO / ".importlinter"
TOP_LEVEL = ("flows", "stages", "artifacts")  # installed as quantgate.<folder>
MAX_MODULE_LINES = 400


@pytest.fixture
def laid_out(tmp_path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "quantgate", tmp_path / "quantgate", ignore=ignore)
    for folder in TOP_LEVEL:
        shutil.copytree(REPO / folder, tmp_path / "quantgate" / folder, ignore=ignore)
    return tmp_path


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("lint-imports")), str(CONTRACTS), "--no-cache"]
    # The copy first on the path: the installed (editable) quantgate must not be the one analysed.
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}  # one contract name per line
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_import_contracts_hold(laid_out):
    result = lint_imports(laid_out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("importer", "line", "contract"), [
    ("quantgate/stages/quantize/ptq.py", "from quantgate.stages.convert.onnx_export import convert",
     "stages are siblings"),
    ("quantgate/tasks/text.py", "import quantgate.stages.evaluate.accuracy", "cli over flows"),
    ("quantgate/bundle/writer.py", "from quantgate.stages.train.loop import train", "the CLI, the bundles"),
    ("quantgate/artifacts/manifest.py", "import quantgate.samples.reading", "the store knows no"),
    ("quantgate/int8/onnx_ops.py", "import quantgate.int8.lower_int8", "no import cycles"),
])
def test_a_forbidden_import_breaks_its_contract(laid_out, importer, line, contract):
    """Each contract can fail: one import of the kind it forbids, added to a copy, breaks it (and only the copy)."""
    path = laid_out / importer
    path.write_text(path.read_text() + f"\n{line}  # added by the test\n")
    result = lint_imports(laid_out)
    assert result.returncode != 0, result.stdout
    broken = result.stdout[result.stdout.index("Broken contracts"):]
    assert contract in broken, result.stdout


def test_no_module_of_the_package_is_over_400_lines():
    sources = [path for folder in ("quantgate", *TOP_LEVEL) for path in (REPO / folder).rglob("*.py")]
    too_long = {str(path.relative_to(REPO)): lines for path in sources
                if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert sources and not too_long, f"split these modules (over {MAX_MODULE_LINES} lines): {too_long}"
