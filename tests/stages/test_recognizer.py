"""Text recognition in the train and export stages: the built-in CRNN, CTC under AMP, user recognizers.

The lines are synthetic bars (character "1": a bar in the top half, "2": in the bottom half, "3": the
full height) written as a data stage's arrays folder, so these tests need nothing from the text datasets.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import paddle
import pytest
from paddle import nn

from quantgate.config import QuantizeConfig, TrainConfig
from quantgate.int8.static_graph import load_program, static_mode
from quantgate.models.models import build_model
from quantgate.stages.convert.onnx_export import convert
from quantgate.stages.export.inference_model import export
from quantgate.stages.quantize.ptq import quantize
from quantgate.stages.train.errors import ModelError
from quantgate.stages.train.loop import train
from quantgate.tasks.text import greedy_decode

CHARACTERS = ("1", "2", "3")
SHAPE = (1, 16, 48)  # T = 48 / 4 = 12 frames for lines of 2-3 characters
CHARACTER_WIDTH, GAP = 8, 4
SPLIT_SIZES = {"train": 320, "calibration": 64, "validation": 32, "test": 64}
FAST = {"epochs": 3, "batch_size": 32, "learning_rate": 5e-3}


def bar_lines(count: int, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """`count` noisy line images [N, 1, 16, 48] of 2-3 bar characters, and their texts."""
    _, height, width = SHAPE
    images = rng.normal(0.0, 0.1, (count, 1, height, width)).astype(np.float32)
    texts = []
    for line in range(count):
        text = "".join(rng.choice(CHARACTERS, size=int(rng.integers(2, 4))))
        x = int(rng.integers(0, GAP + 1))
        for character in text:
            rows = {"1": slice(0, height // 2), "2": slice(height // 2, height), "3": slice(0, height)}[character]
            images[line, 0, rows, x:x + CHARACTER_WIDTH] += 1.0
            x += CHARACTER_WIDTH + GAP
        texts.append(text)
    return images, texts


def write_text_arrays(folder: Path, seed: int = 0) -> Path:
    """A data stage's folder for text recognition with in-memory arrays (the data contract's layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays, first, length = {}, 0, 3
    for split, count in SPLIT_SIZES.items():
        images, texts = bar_lines(count, rng)
        ids = np.zeros((count, length), np.int64)
        for row, text in enumerate(texts):
            ids[row, :len(text)] = [CHARACTERS.index(character) + 1 for character in text]
        arrays.update({f"x_{split}": images, f"y_{split}": ids, f"text_{split}": np.asarray(texts, dtype="<U3"),
                       f"index_{split}": np.arange(first, first + count, dtype=np.int64)})
        first += count
    np.savez(folder / "splits.npz", **arrays)
    spec = {"task": "text_recognition", "kind": "arrays", "dataset": "digit_strings", "characters": list(CHARACTERS),
            "num_classes": len(CHARACTERS) + 1, "max_text_length": length, "input_shape": list(SHAPE),
            "transforms": {"rec_image_shape": list(SHAPE)}, "seed": seed}
    (folder / "dataset.json").write_text(json.dumps(spec, sort_keys=True))
    return folder


@pytest.fixture(scope="module")
def bars(tmp_path_factory) -> Path:
    return write_text_arrays(tmp_path_factory.mktemp("bars") / "data")


@pytest.fixture(scope="module")
def trained_crnn(bars, tmp_path_factory):
    """The built-in CRNN (conv neck) trained a few epochs on the bars, AMP O1 requested as by default."""
    out = tmp_path_factory.mktemp("crnn")
    return out, train(TrainConfig(architecture="crnn", **FAST), bars, out)


@pytest.fixture(scope="module")
def exported_crnn(trained_crnn, bars, tmp_path_factory):
    out, _ = trained_crnn
    folder = tmp_path_factory.mktemp("crnn-export")
    return folder, export(out / "weights.npz", out / "reference_logits.npy", bars, "crnn", folder, neck="conv")


def fp32_and_int8_onnx(export_dir: Path, data: Path, folder: Path) -> dict:
    """PaddleSlim PTQ of an exported model, then the convert stage; returns the convert metrics."""
    quantized, converted = folder / "quantize", folder / "convert"
    quantized.mkdir()
    converted.mkdir()
    quantize(QuantizeConfig(strategy="single", batch_size=16), export_dir, "model.pdmodel", "model.pdiparams", data,
             quantized)
    return convert(export_dir, quantized, "model.pdmodel", "model.pdiparams", converted).metrics


def onnx_outputs(onnx_file: Path, images: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


# --- user recognizers, imported by entry point (tests/stages is on sys.path, as for test_vision_models) ---

class TinyRecognizer(nn.Layer):
    """One conv over the line, the height averaged away, a linear head per column: [N, W, classes]."""

    def __init__(self, num_classes: int, channels: int):
        super().__init__()
        self.conv = nn.Conv2D(channels, 16, 3, padding=1)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        columns = paddle.mean(nn.functional.relu(self.conv(x)), axis=2)  # [N, 16, W]
        return self.head(paddle.transpose(columns, [0, 2, 1]))


def tiny_recognizer(num_classes: int, input_shape: tuple[int, ...]) -> nn.Layer:
    return TinyRecognizer(num_classes, input_shape[0])


def flat_classifier(num_classes: int, input_shape: tuple[int, ...]) -> nn.Layer:
    """A classifier's [N, classes] output: not something CTC can train."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))


@pytest.mark.parametrize("neck", ["conv", "bilstm"])
def test_crnn_scores_a_frame_per_4_or_8_columns_over_the_dictionary_and_blank(neck):
    model = build_model("crnn", 11, (1, 32, 320), neck)  # from 32 pixels high, a frame per 8 columns
    model.eval()
    assert list(model(paddle.zeros([2, 1, 32, 320])).shape) == [2, 40, 11]
    small = build_model("crnn", 11, (1, 16, 128), neck)
    small.eval()
    assert list(small(paddle.zeros([3, 1, 16, 128])).shape) == [3, 32, 11]


def test_crnn_refuses_lines_too_low_to_reduce():
    with pytest.raises(ModelError, match="crnn.*at least 16 pixels high"):
        build_model("crnn", 11, (1, 8, 64))


def test_ctc_training_learns_the_bars(trained_crnn, bars):
    out, result = trained_crnn
    with open(out / "steps.csv") as handle:
        losses = [float(row["loss"]) for row in csv.DictReader(handle)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) / 2
    assert result.metrics["task"] == "text_recognition" and result.metrics["neck"] == "conv"
    reference = np.load(out / "reference_logits.npy")
    assert reference.shape == (SPLIT_SIZES["test"], 12, len(CHARACTERS) + 1)
    with np.load(bars / "splits.npz") as stored:
        texts = stored["text_test"]
    assert np.mean(greedy_decode(reference, CHARACTERS) == texts) > 0.5  # line accuracy after 3 short epochs


def test_ctc_loss_is_black_listed_and_recorded_in_float32(trained_crnn):
    out, result = trained_crnn
    assert result.metrics["amp"]["requested"]["enabled"] is True
    assert result.metrics["amp"]["task_black_list"] == ["warpctc"]
    record = json.loads((out / "op_precision.json").read_text())
    assert record["task_black_list"] == ["warpctc"]
    assert record["ops"]["warpctc"]["float32"] >= 1
    assert record["ops"]["warpctc"]["float16"] == record["ops"]["warpctc"]["bfloat16"] == 0
    assert "warpctc" in record["float32_only_ops"] and "warpctc" not in record["low_precision_ops"]


def test_ctc_trains_when_o2_bfloat16_is_requested(bars, tmp_path):
    config = TrainConfig(architecture="crnn", epochs=1, batch_size=64, amp={"level": "O2", "dtype": "bfloat16"})
    result = train(config, bars, tmp_path)
    assert result.metrics["amp"]["task_black_list"] == ["warpctc"]
    assert np.isfinite(result.metrics["final_epoch_loss_mean"])
    with np.load(tmp_path / "weights.npz") as weights:
        assert {weights[name].dtype for name in weights.files} == {np.dtype("float32")}


def test_crnn_export_keeps_sequence_logits_with_a_dynamic_batch(exported_crnn):
    folder, result = exported_crnn
    assert result.metrics["output_shape"] == [-1, 12, len(CHARACTERS) + 1]
    assert result.metrics["max_abs_diff_vs_trained"] <= 1e-4
    assert result.metrics["checked_samples"] == SPLIT_SIZES["test"]
    with static_mode():
        saved = load_program(folder / "model")
        for batch in (1, 5):
            assert saved.run(np.zeros((batch, *SHAPE), np.float32)).shape == (batch, 12, len(CHARACTERS) + 1)


def test_export_with_another_neck_than_trained_names_the_mismatch(trained_crnn, bars, tmp_path):
    out, _ = trained_crnn
    with pytest.raises(ModelError, match="do not fit train.architecture='crnn'.*train.neck"):
        export(out / "weights.npz", out / "reference_logits.npy", bars, "crnn", tmp_path, neck="bilstm")


def test_a_user_recognizer_returning_sequence_logits_trains(bars, tmp_path):
    config = TrainConfig(architecture="test_recognizer:tiny_recognizer", epochs=1, batch_size=64)
    result = train(config, bars, tmp_path)
    assert result.metrics["task"] == "text_recognition" and result.metrics["neck"] is None
    assert np.load(tmp_path / "reference_logits.npy").shape == (SPLIT_SIZES["test"], SHAPE[2], len(CHARACTERS) + 1)


def test_a_user_model_with_classifier_outputs_is_refused_for_text(bars, tmp_path):
    config = TrainConfig(architecture="test_recognizer:flat_classifier", epochs=1)
    with pytest.raises(ModelError, match=r"returned \[2, 4\] for a batch of 2 line images.*\[N, T, 4\]"):
        train(config, bars, tmp_path)
    assert not (tmp_path / "weights.npz").exists()


def test_conv_neck_crnn_runs_every_conv_and_the_head_in_int8(exported_crnn, bars, tmp_path):
    folder, _ = exported_crnn
    metrics = fp32_and_int8_onnx(folder, bars, tmp_path)
    fp32_ops = metrics["fp32"]["after_onnxruntime_optimization"]["ops"]
    int8_ops = metrics["int8"]["after_onnxruntime_optimization"]["ops"]
    assert int8_ops["QLinearConv"] == fp32_ops["Conv"] == 12 and "Conv" not in int8_ops
    assert int8_ops["MatMulIntegerToFloat"] == 1 and not {"MatMul", "FusedMatMul"} & set(int8_ops)
    with np.load(bars / "splits.npz") as stored:
        images = stored["x_test"]
    fp32, int8 = (greedy_decode(onnx_outputs(tmp_path / "convert" / name, images), CHARACTERS)
                  for name in ("fp32.onnx", "int8.onnx"))
    assert np.mean(fp32 == int8) >= 0.9


def test_bilstm_neck_crnn_exports_and_converts_with_its_lstm_in_float(bars, tmp_path):
    train_dir, export_dir = tmp_path / "train", tmp_path / "export"
    train_dir.mkdir()
    export_dir.mkdir()
    train(TrainConfig(architecture="crnn", neck="bilstm", epochs=1, batch_size=64), bars, train_dir)
    result = export(train_dir / "weights.npz", train_dir / "reference_logits.npy", bars, "crnn", export_dir,
                    neck="bilstm")
    assert result.metrics["max_abs_diff_vs_trained"] <= 1e-4
    assert result.metrics["parameter_dtypes"] == ["float32", "uint8"]  # the LSTM's dropout state, not a weight
    int8_ops = fp32_and_int8_onnx(export_dir, bars, tmp_path)["int8"]["after_onnxruntime_optimization"]["ops"]
    assert int8_ops["LSTM"] == 1 and int8_ops["QLinearConv"] == 10 and int8_ops["MatMulIntegerToFloat"] == 1
