"""The quantize stage's code version covers every module its search runs, in its own package and in the libraries
beneath it, and nothing it does not.

Only source files are read and edited here, in a copy of the stages and library trees: nothing is imported or run.
"""

import shutil

import pytest

from quantgate.flows import code_version
from quantgate.flows.code_version import code_digest, code_files

# What a search trial runs (PaddleSlim calibration, the lowering, validation, latency), split
# into modules: editing any of them must recompute the quantize stage.
SEARCH_MODULES = (
    "stages/quantize/search.py",
    "stages/quantize/trials.py",
    "stages/quantize/fallback_ranking.py",
    "stages/quantize/search_record.py",
    "stages/quantize/layer_sensitivity.py",
    "stages/quantize/validation_check.py",
    "stages/quantize/ptq.py",
    "quantgate/int8/lower_int8.py",
    "quantgate/int8/paddle_quantization.py",
    "quantgate/int8/float_layers.py",
    "quantgate/int8/scale_propagation.py",
    "quantgate/int8/onnx_conversion.py",
    "quantgate/runtimes/latency.py",
    "quantgate/policy/decision.py",
    "quantgate/samples/reading.py",
)


@pytest.fixture(scope="session")
def prefect_server():
    """These tests read source files only: no Prefect server (overrides tests/flows/conftest.py)."""
    yield


@pytest.fixture
def stages_copy(tmp_path, monkeypatch):
    """A copy of the stages and library trees that code_version reads instead of the installed ones; paths in it
    are repository-relative (stages/..., quantgate/...)."""
    roots = code_version.source_roots()
    shutil.copytree(roots[code_version.STAGES_PACKAGE], tmp_path / "stages",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(roots[code_version.PACKAGE], tmp_path / "quantgate", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_version, "source_roots", lambda: {code_version.STAGES_PACKAGE: tmp_path / "stages",
                                                               code_version.PACKAGE: tmp_path / "quantgate"})
    code_digest.cache_clear()
    yield tmp_path
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
    for path in sorted((stages_copy / "stages" / "report").glob("*.py")):
        edit_one_byte(path)
    code_digest.cache_clear()
    assert code_digest("report") != report_before
    assert code_digest("quantize") == quantize_before


def test_editing_a_library_module_recomputes_the_stages_that_import_it_and_no_other(stages_copy):
    """quantgate.pictures draws the report's pages: the report imports it, quantize never does."""
    quantize_before, report_before = code_digest("quantize"), code_digest("report")
    edit_one_byte(stages_copy / "quantgate" / "pictures" / "page_picture.py")
    code_digest.cache_clear()
    assert code_digest("report") != report_before
    assert code_digest("quantize") == quantize_before


def test_editing_config_or_the_cli_leaves_every_stage_alone(stages_copy):
    before = {stage: code_digest(stage) for stage in ("data", "quantize", "evaluate", "report")}
    for path in ("config.py", "errors.py", "cli/run.py", "bundle/writer.py"):
        edit_one_byte(stages_copy / "quantgate" / path)
    code_digest.cache_clear()
    assert {stage: code_digest(stage) for stage in before} == before
