"""The checks a model trained elsewhere passes before anything runs (stages/source/checks.py), on PaddleOCR's
real recognizer and direction classifier and on small programs written here: every refusal names the problem
and its fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import paddleocr_models  # noqa: E402

from quantgate.config import validate_config  # noqa: E402
from quantgate.stages.source import ModelProblem, check_trained_model  # noqa: E402

TWO_INPUTS = """
import sys, paddle
class Two(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 2, 3)
    def forward(self, x, y):
        return paddle.flatten(self.conv(x) + self.conv(y), 1)
paddle.jit.save(Two(), sys.argv[1] + "/inference", input_spec=[paddle.static.InputSpec([None, 3, 8, 8], "float32", "x"),
                paddle.static.InputSpec([None, 3, 8, 8], "float32", "y")])
"""


@pytest.fixture(scope="module")
def models():
    return paddleocr_models()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    """An image-classification folder (a/, b/) and a text-line root, enough for the configs to validate."""
    root = tmp_path_factory.mktemp("data")
    for name in ("a", "b"):
        (root / name).mkdir()
    (root / "labels.txt").write_text("x.png\t1\n", encoding="utf-8")
    return root


def rec_config(models, root: Path, transforms: dict | None = None, **data) -> dict:
    return {"task": "text_recognition", "trained_model": {"path": str(models.rec)},
            "data": {"dataset": "text_lines", "path": str(root), "label_file": str(root / "labels.txt"),
                     "character_dict": str(models.keys), "use_space_char": True,
                     "transforms": transforms or {"rec_image_shape": [3, 48, 320], "color": "bgr"}, **data}}


def problems(raw: dict) -> str:
    with pytest.raises(ModelProblem) as refused:
        check_trained_model(validate_config(raw))
    assert refused.value.exit_code == 2
    return str(refused.value)


def test_the_real_recognizer_passes_and_is_described(models, folders):
    checked = check_trained_model(validate_config(rec_config(models, folders)))
    summary = checked.summary
    assert [spec.name for spec in summary.inputs] == ["x"] and summary.inputs[0].shape[1:3] == (3, 48)
    assert summary.measured_output_shape == (1, 40, 6625) and summary.output_kind == "probabilities"
    assert summary.parameters > 1_000_000 and summary.ops["conv2d"] > 10
    assert {"inference.pdmodel", "inference.pdiparams"} <= set(checked.files)


def test_a_folder_without_a_model_lists_what_is_there(models, folders, tmp_path):
    (tmp_path / "best_accuracy.pdparams").write_bytes(b"\x80\x04not really")
    (tmp_path / "notes.txt").write_text("x")
    message = problems({**rec_config(models, folders), "trained_model": {"path": str(tmp_path)}})
    assert "holds no inference.pdmodel + inference.pdiparams" in message
    assert "best_accuracy.pdparams, notes.txt" in message and "training checkpoint" in message


def test_another_stem_is_named_as_the_prefix_to_set(models, folders, tmp_path):
    for suffix in (".pdmodel", ".pdiparams"):
        (tmp_path / f"model{suffix}").write_bytes((models.rec / f"inference{suffix}").read_bytes())
    message = problems({**rec_config(models, folders), "trained_model": {"path": str(tmp_path)}})
    assert "set trained_model.prefix to 'model'" in message


def test_a_dictionary_without_the_space_is_one_class_short(models, folders):
    message = problems(rec_config(models, folders, use_space_char=False))
    assert "outputs 6625" in message and "6623 characters + 1 CTC blank make 6624" in message


def test_inputs_the_transforms_cannot_produce_are_named(models, folders):
    gray = problems(rec_config(models, folders, transforms={"rec_image_shape": [1, 48, 320]}))
    assert "has C=3, but data.transforms.rec_image_shape gives C=1" in gray
    short = problems(rec_config(models, folders, transforms={"rec_image_shape": [3, 32, 320]}))
    assert "has H=48" in short and "H=32" in short


def test_a_classifier_is_no_recognizer_and_a_recognizer_no_classifier(models, folders):
    as_text = problems({**rec_config(models, folders, transforms={"rec_image_shape": [3, 48, 192]}),
                        "trained_model": {"path": str(models.cls)}})
    assert "needs a recognizer's [N, T, C] output" in as_text and "[1, 2]" in as_text
    as_classes = problems({"trained_model": {"path": str(models.rec)},
                           "data": {"dataset": "image_folder", "path": str(folders),
                                    "transforms": {"resize_pad": [48, 320], "color": "bgr"}}})
    assert "task classification needs an [N, classes] output" in as_classes and "text_recognition" in as_classes


def test_the_class_list_must_be_the_models(models, folders):
    message = problems({"trained_model": {"path": str(models.cls)},
                        "data": {"dataset": "image_folder", "path": str(folders), "class_names": ["0", "90", "180"],
                                 "transforms": {"resize_pad": [48, 192], "color": "bgr"}}})
    assert "outputs 2 classes" in message and "data.class_names' 3 names make 3" in message


def test_an_int8_program_is_refused_as_already_int8(stage_dirs, folders):
    # The digits pipeline's quantize stage wrote PaddleSlim's INT8 program as model.pdmodel.
    message = problems({"trained_model": {"path": str(stage_dirs.quantize), "prefix": "model"},
                        "data": {"dataset": "image_folder", "path": str(folders),
                                 "transforms": {"resize": [8, 8], "color": "grayscale"}}})
    assert "already INT8" in message and "quantize_linear" in message


def test_a_model_with_two_inputs_is_refused(folders, tmp_path):
    env = {**os.environ, "FLAGS_enable_pir_api": "0"}
    script = tmp_path / "two_inputs.py"  # a file: paddle.jit.save reads the layer's source to trace it
    script.write_text(TWO_INPUTS)
    subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, check=True, capture_output=True)
    message = problems({"trained_model": {"path": str(tmp_path)},
                        "data": {"dataset": "image_folder", "path": str(folders), "transforms": {"resize": [8, 8]}}})
    assert "takes 2 inputs (x, y)" in message


def test_training_settings_beside_a_trained_model_are_named_as_without_effect(models, folders):
    from quantgate.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        validate_config({**rec_config(models, folders), "train": {"epochs": 3, "amp": {"level": "O2"}}})
    assert "train.epochs, train.amp.level have no effect with trained_model" in str(refused.value)
    # The example config writes every field with its default: that is not "set".
    validate_config({**rec_config(models, folders), "train": {"epochs": 12, "amp": {"level": "O1"}}})
