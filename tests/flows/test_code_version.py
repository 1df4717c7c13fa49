"""The quantize stage's code version covers every module its search runs, and nothing it does not.

Only source files are read and edited here, in a copy of the stages tree: nothing is imported or run.
"""

import shutil

import pytest

from quantgate.flows import code_version
from quantgate.flows.code_version import code_digest, code_files

# What a search trial runs (PaddleSlim calibration, the lowering, validation, latency), split
# into modules: editing any of them must recompute the quantize stage.
SEARCH_MODULES = (
    "quantize/search.py",
    "quantize/trials.py",
    "quantize/fallback_ranking.py",
    "quantize/search_record.py",
    "quantize/layer_sensitivity.py",
    "quantize/validation_check.py",
    "quantize/ptq.py",
    "convert/lower_int8.py",
    "convert/paddle_quantization.py",
    "convert/float_layers.py",
    "convert/scale_propagation.py",
    "convert/onnx_export.py",
    "evaluate/latency.py",
)


@pytest.fixture(scope="session")
def prefect_server():
    """These tests read source files only: no Prefect server (overrides tests/flows/conftest.py)."""
    yield


@pytest.fixture
def stages_copy(tmp_path, monkeypatch):
    """A copy of the stages tree that code_version reads instead of the installed one."""
    root = tmp_path / "stages"
    shutil.copytree(code_version.stages_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_version, "stages_root", lambda: root)
    code_digest.cache_clear()
    yield root
    code_digest.cache_clear()


def edit_one_byte(path) -> None:
    """Replace the file's final newline with a space: still valid Python, same length, other content."""
    source = path.read_bytes()
    assert source.endswith(b"\n"), path
    path.write_bytes(source[:-1] + b" ")


def test_quantize_code_covers_every_module_of_the_search():
    covered = set(code_files("quantize"))
    assert set(SEARCH_MODULES) <= covered, sorted(set(SEARCH_MODULES) - covered)


@pytest.mark.parametrize("module", SEARCH_MODULES)
def test_editing_a_module_of_the_search_changes_the_quantize_code_version(stages_copy, module):
    before = code_digest("quantize")
    edit_one_byte(stages_copy / module)
    code_digest.cache_clear()
    assert code_digest("quantize") != before


def test_editing_the_report_package_leaves_the_quantize_code_version_alone(stages_copy):
    quantize_before, report_before = code_digest("quantize"), code_digest("report")
    for path in sorted((stages_copy / "report").glob("*.py")):
        edit_one_byte(path)
    code_digest.cache_clear()
    assert code_digest("report") != report_before
    assert code_digest("quantize") == quantize_before
