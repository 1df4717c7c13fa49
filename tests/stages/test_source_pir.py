"""A PIR export (Paddle 3's default) is read and converted to FP32 ONNX by paddle2onnx 2.x in child processes, and
what cannot be trusted is refused with exit 2 and nothing stored. The models are real paddle.jit.save outputs
written in subprocesses (FLAGS_enable_pir_api is read once, when paddle is first imported); the failing converters
are real converter folders whose `paddle2onnx.export` aborts, writes nothing, or writes a model with a wrong bias."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantgate.errors import EXIT_BAD_INPUT
from quantgate.pir.children import paddle_outputs
from quantgate.pir.conversion import convert_fp32, float64_interp_scales, onnx_outputs
from quantgate.pir.converter import FOLDER_ENV, INSTALL_LINE, PIN, find_converter
from quantgate.pir.errors import ConversionRefused, ConverterMissing, PirProblem
from quantgate.pir.folder import find_pir_folder, program_facts, require_pir_program
from quantgate.stages.source.checks import model_files
from quantgate.stages.source.errors import ModelProblem

OPSET = 13
SAVE_TINY_MODEL = """
import sys, paddle
paddle.seed(0)
net = paddle.nn.Sequential(
    paddle.nn.Conv2D(3, 4, 3), paddle.nn.ReLU(), paddle.nn.Flatten(), paddle.nn.Linear(4 * 14 * 14, 5))
net.eval()
spec = [paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")]
if sys.argv[2:] == ["old-ir-guard"]:
    with paddle.pir_utils.DygraphOldIrGuard():
        paddle.jit.save(net, sys.argv[1], input_spec=spec)
else:
    paddle.jit.save(net, sys.argv[1], input_spec=spec)
"""

# What a user would try first: load the PIR model and save it again with the legacy IR switched on.
RESAVE_AS_LEGACY = """
import sys, paddle
layer = paddle.jit.load(sys.argv[1])
with paddle.pir_utils.DygraphOldIrGuard():
    paddle.jit.save(layer, sys.argv[2], input_spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")])
"""

# A converter folder beside the real one: its `export` aborts, writes an empty file, or runs the real paddle2onnx
# 2.x and then shifts a weight (a conversion that disagrees with Paddle, as a garbage epsilon does).
BROKEN_CONVERTER = '''
import os, subprocess, sys
__version__ = "2.1.0"
__file__ = __file__

def export(model_filename, params_filename, save_file, **options):
    mode = os.environ["BROKEN_CONVERTER_MODE"]
    if mode == "abort":
        os.abort()
    if mode == "empty":
        open(save_file, "wb").close()
        return
    real = ("import sys; sys.path.insert(0, sys.argv[4]); import paddle2onnx; paddle2onnx.export("
            "model_filename=sys.argv[1], params_filename=sys.argv[2], save_file=sys.argv[3], opset_version=13, "
            "enable_onnx_checker=True, optimize_tool='None')")
    subprocess.run([sys.executable, "-c", real, model_filename, params_filename, save_file,
                    os.environ["REAL_CONVERTER"]], check=True)
    import numpy as np, onnx
    from onnx import numpy_helper
    model = onnx.load(save_file)
    # the largest weight (the Linear's), an initializer or a Constant node's value as 2.x writes them
    tensors = [*model.graph.initializer, *(a.t for n in model.graph.node if n.op_type == "Constant"
                                          for a in n.attribute if a.name == "value")]
    weight = max(tensors, key=lambda tensor: int(np.prod(tensor.dims)))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) + 0.5, weight.name))
    onnx.save(model, save_file)
'''


def run_paddle(script: str, pir: bool, *args: Path | str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLAGS_enable_pir_api": "1" if pir else "0"}
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """The same seeded layer saved with PIR on, with it off, and with it on but inside the old-IR guard."""
    root = tmp_path_factory.mktemp("exports")
    runs = {"pir": (True,), "legacy": (False,), "guarded": (True, "old-ir-guard")}
    for kind, (pir, *mode) in runs.items():
        saved = run_paddle(SAVE_TINY_MODEL, pir, root / kind / "inference", *mode)
        assert saved.returncode == 0, saved.stderr[-2000:]
    return {kind: root / kind for kind in runs}


@pytest.fixture
def samples() -> np.ndarray:
    return np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)


@pytest.fixture
def broken_converter(tmp_path, monkeypatch):
    """A converter folder whose export misbehaves as BROKEN_CONVERTER_MODE says."""
    real = find_converter().folder
    folder = tmp_path / "broken-paddle2onnx"
    (folder / "paddle2onnx").mkdir(parents=True)
    (folder / "paddle2onnx-2.1.0.dist-info").mkdir()
    (folder / "paddle2onnx" / "__init__.py").write_text(BROKEN_CONVERTER)
    monkeypatch.setenv(FOLDER_ENV, str(folder))
    monkeypatch.setenv("REAL_CONVERTER", str(real))
    return lambda mode: monkeypatch.setenv("BROKEN_CONVERTER_MODE", mode)


def test_jit_save_writes_a_pir_program_with_pir_on_and_pdmodel_with_it_off_or_in_the_old_ir_guard(exports):
    assert sorted(p.name for p in exports["pir"].iterdir()) == ["inference.json", "inference.pdiparams"]
    assert (exports["legacy"] / "inference.pdmodel").is_file() and not (exports["legacy"] / "inference.json").exists()
    assert (exports["guarded"] / "inference.pdmodel").is_file()
    # the parameters travel unchanged; only the program format differs
    assert (exports["pir"] / "inference.pdiparams").read_bytes() == \
        (exports["legacy"] / "inference.pdiparams").read_bytes()


def test_the_pir_program_is_read_without_paddle(exports):
    found = find_pir_folder(exports["pir"], "inference")
    facts = program_facts(require_pir_program(found.program))
    assert [(t.name, t.shape, t.dtype) for t in facts.inputs] == [("x", (-1, 3, 16, 16), "float32")]
    assert len(facts.outputs) == 1 and facts.outputs[0].shape[-1] == 5
    assert facts.parameters == 4 * 3 * 3 * 3 + 4 + 4 * 14 * 14 * 5 + 5 and len(facts.parameter_dtypes) == 4
    assert facts.ops["conv2d"] == 1 and "p" not in facts.ops
    folder, files = model_files(type("TM", (), {"path": str(exports["pir"]), "prefix": "inference"})())
    assert folder == exports["pir"].resolve() and set(files) == {"inference.json", "inference.pdiparams"}


def test_a_program_translated_to_pir_reads_its_feed_op_as_the_input(exports, tmp_path):
    """paddle.pir.translate_to_pir keeps the legacy program's feed ops where jit.save writes data ops: the same
    input, which the source stage once missed ("the model takes 0 inputs")."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from support.pir_models import TRANSLATE_TO_PIR

    translated = run_paddle(TRANSLATE_TO_PIR, False, exports["legacy"], tmp_path)
    assert translated.returncode == 0, translated.stderr[-2000:]
    program = require_pir_program(find_pir_folder(tmp_path, "inference").program)
    assert '"1.feed"' in json.dumps(program) and '"1.data"' not in json.dumps(program)
    facts = program_facts(program)
    assert [(t.name, t.shape, t.dtype) for t in facts.inputs] == [("x", (-1, 3, 16, 16), "float32")]


def test_the_tiny_pir_net_converts_to_onnx_that_gives_paddles_outputs(exports, samples, tmp_path):
    found = find_pir_folder(exports["pir"], "inference")
    record = convert_fp32(found, tmp_path / "fp32.onnx", samples, OPSET)
    paddle, run = paddle_outputs(found.program, found.params, samples)
    assert np.abs(onnx_outputs(tmp_path / "fp32.onnx", samples) - paddle).max() <= 1e-5
    assert record["converter"]["version"] == PIN.split("==")[1] and record["opset"] == OPSET
    assert record["check_vs_paddle"]["samples"] == 4
    assert record["check_vs_paddle"]["max_abs_diff"] <= record["check_vs_paddle"]["max_abs_diff_limit"]
    assert record["patches"] == [] and run["onednn"] is True
    assert [p.name for p in tmp_path.iterdir()] == ["fp32.onnx"]  # the converter's scratch is gone


@pytest.mark.parametrize("mode, said", [("abort", "exited"), ("empty", "wrote an empty file"),
                                        ("disagree", "differ from Paddle Inference's FP32 outputs")])
def test_a_converter_that_aborts_writes_nothing_or_disagrees_is_refused_and_nothing_is_stored(
        exports, samples, tmp_path, broken_converter, mode, said):
    broken_converter(mode)
    stage = tmp_path / "convert"
    stage.mkdir()
    with pytest.raises(ConversionRefused, match=said) as caught:
        convert_fp32(find_pir_folder(exports["pir"], "inference"), stage / "fp32.onnx", samples, OPSET)
    assert caught.value.exit_code == EXIT_BAD_INPUT and "nothing was stored" in str(caught.value)
    assert list(stage.iterdir()) == []


def test_a_missing_paddle2onnx_2_names_its_install_line(tmp_path, monkeypatch):
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ConverterMissing) as caught:
        find_converter()
    assert INSTALL_LINE in str(caught.value) and caught.value.exit_code == EXIT_BAD_INPUT
    assert INSTALL_LINE == ".venv/bin/pip install --no-deps --target .venv/paddle2onnx-2 paddle2onnx==2.1.0"
    monkeypatch.delenv(FOLDER_ENV)
    assert find_converter().folder == Path(sys.prefix) / "paddle2onnx-2"  # installed here by the README's command


def test_the_pin_is_the_one_pyproject_and_the_readme_install(tmp_path):
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    assert tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["quantgate"]["paddle2onnx2"] == PIN
    assert INSTALL_LINE in (repo / "README.md").read_text()


def test_a_json_that_is_not_a_pir_program_is_named(tmp_path):
    (tmp_path / "inference.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    (tmp_path / "inference.pdiparams").write_bytes(b"\0")
    with pytest.raises(PirProblem, match=r"inference\.json is JSON but not a PIR program"):
        find_pir_folder(tmp_path, "inference")
    with pytest.raises(ModelProblem, match="not a PIR program") as caught:
        model_files(type("TM", (), {"path": str(tmp_path), "prefix": "inference"})())
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_a_folder_with_neither_format_is_named_with_what_it_holds(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ModelProblem) as caught:
        model_files(type("TM", (), {"path": str(tmp_path), "prefix": "inference"})())
    message = str(caught.value)
    assert "inference.pdmodel" in message and "inference.json" in message and "weights.bin" in message


def test_float64_interpolation_scales_are_rewritten_as_float32_in_a_copy():
    op = {"#": "1.nearest_interp", "A": [{"AT": {"#": "0.a_array", "D": [{"#": "0.a_f64", "D": 2.0}] * 2},
                                         "N": "scale"}]}
    program = {"base_code": {"magic": "pir"}, "program": {"regions": [{"blocks": [{"ops": [op]}]}]}}
    patched, changed = float64_interp_scales(program)
    assert changed and "nearest_interp" in changed[0]
    assert {item["#"] for item in patched["program"]["regions"][0]["blocks"][0]["ops"][0]["A"][0]["AT"]["D"]} == \
        {"0.a_f32"}
    assert op["A"][0]["AT"]["D"][0]["#"] == "0.a_f64"  # the original is untouched


def test_paddle_cannot_resave_a_pir_model_in_the_legacy_format(exports, tmp_path):
    # Why a PIR model keeps its format (and its INT8 is calibrated on the ONNX graph); if a Paddle upgrade makes
    # this work, PaddleSlim could quantize it instead.
    resaved = run_paddle(RESAVE_AS_LEGACY, True, exports["pir"] / "inference", tmp_path / "inference")
    assert resaved.returncode != 0 and "IrMapping" in resaved.stderr
    assert not (tmp_path / "inference.pdmodel").exists()
