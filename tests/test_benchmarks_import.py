"""Every script in benchmarks/ still imports: a renamed function or a moved module fails here, not in the next
benchmark session hours later. Imported, not run (their `main` waits for `__name__ == "__main__"`), all in one
fresh process, so their sys.path changes and module names never reach the test process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("*.py"))

_IMPORT_ALL = """
import importlib.util, json, sys, traceback
from pathlib import Path
folder = Path(sys.argv[1])
sys.path[:0] = [str(folder)]  # as `python benchmarks/x.py` would: the scripts import each other by name
results = {}
for name in sys.argv[2:]:
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{name[:-3]}", folder / name)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
        results[name] = None
    except BaseException:
        results[name] = traceback.format_exc(limit=-3)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported() -> dict[str, str | None]:
    """{script: None, or the tail of the traceback its import raised}."""
    result = subprocess.run([sys.executable, "-c", _IMPORT_ALL, str(BENCHMARKS), *SCRIPTS], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_there_are_benchmark_scripts():
    assert "rounding.py" in SCRIPTS and len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_imports(imported, script):
    assert imported[script] is None, f"benchmarks/{script} does not import:\n{imported[script]}"
