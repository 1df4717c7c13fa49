"""The data stage for text recognition: text lines in PaddleOCR's layout and the built-in digit strings."""

import json

import numpy as np
import pytest
from PIL import Image
from text_lines import CHINESE, line_image, write_dictionary, write_text_lines

from quantgate.config import ConfigError, DataConfig, validate_config
from quantgate.errors import BadInput
from quantgate.samples.file_table import read_table
from quantgate.stages.data import DataChanged, HashState, open_data, plan_text_lines, prepare_data
from quantgate.tasks.text import greedy_decode

SPLITS = ("train", "calibration", "validation", "test")


def run(config: DataConfig, out, plan=None):
    out.mkdir(exist_ok=True)
    return prepare_data(config, out, plan)


def decoded(ids: np.ndarray, characters) -> list[str]:
    """Padded ids as strings, through the task's own CTC decoding (one-hot steps, blanks between)."""
    steps = np.zeros((len(ids), 2 * ids.shape[1], len(characters) + 1), np.float32)
    steps[:, 0::2][np.arange(len(ids))[:, None], np.arange(ids.shape[1]), ids] = 1.0
    steps[:, 1::2, 0] = 1.0  # a blank after each character: repeated characters stay two
    return greedy_decode(steps, tuple(characters)).tolist()


def test_a_paddleocr_folder_with_chinese_labels_is_recorded_and_streamed(tmp_path):
    lines = write_text_lines(tmp_path / "数据", lines=40)
    result = run(DataConfig(**lines.data_config()), tmp_path / "a")
    metrics = result.metrics
    assert metrics["task"] == "text_recognition" and sum(metrics[f"samples_{n}"] for n in SPLITS) == 40
    spec = json.loads((tmp_path / "a" / "dataset.json").read_text())
    assert {key: spec[key] for key in ("task", "kind", "dataset", "input_shape", "num_classes")} == {
        "task": "text_recognition", "kind": "files", "dataset": "text_lines", "input_shape": [1, 32, 320],
        "num_classes": len(spec["characters"]) + 1}
    rows = read_table(tmp_path / "a" / "files.csv.gz")
    train_text = {c for row in rows if row.split == "train" for c in row.label_name}
    assert spec["characters"] == sorted(train_text) and set(spec["characters"]) <= set(CHINESE)
    assert (tmp_path / "a" / "characters.txt").read_text(encoding="utf-8").split("\n")[:-1] == spec["characters"]
    assert spec["max_text_length"] == metrics["max_text_length"] == max(map(len, lines.texts))
    assert metrics["num_characters"] == len(spec["characters"]) and metrics["skipped_lines"] == []
    assert any("pad on the right" in step for step in metrics["preprocessing"]["steps"])

    # files, never pixels; a row's label is its line number, its label_name the line's text
    assert not (tmp_path / "a" / "splits.npz").exists()
    assert all(row.file.startswith("图片/行_") and lines.texts[row.label - 1] == row.label_name for row in rows)

    data = open_data(tmp_path / "a")
    assert data.task.name == "text_recognition" and data.num_classes == len(spec["characters"]) + 1
    references = data.references("test")
    assert references.dtype.kind == "U" and len(references) == metrics["samples_test"]
    batches = list(data.batches("test", 3))
    images = np.concatenate([b[0] for b in batches])
    ids = np.concatenate([b[1] for b in batches])
    assert images.dtype == np.float32 and images.shape == (len(references), 1, 32, 320)
    assert ids.dtype == np.int64 and ids.shape == (len(references), spec["max_text_length"])
    assert decoded(ids, spec["characters"]) == references.tolist()
    assert ((ids > 0).sum(axis=1) == [len(text) for text in references]).all()
    assert np.array_equal(data.labels("test"), ids) and data.files("test")[0].endswith(rows[-len(references)].file)
    # dark ink on a light ground, padded with that ground: the right end of a short line is light
    assert images[:, 0, :, -5:].mean() > 0.8 and images.min() < 0.2

    again = run(DataConfig(**lines.data_config()), tmp_path / "b")  # same lines, same seed: same bytes
    assert again.metrics["fingerprint_sha256"] == metrics["fingerprint_sha256"]
    assert (tmp_path / "a" / "files.csv.gz").read_bytes() == (tmp_path / "b" / "files.csv.gz").read_bytes()


def test_a_given_dictionary_decides_the_ids_and_a_test_label_file_the_test_split(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=30, test_lines=6)
    dictionary = write_dictionary(tmp_path / "dict.txt", CHINESE[::-1])
    result = run(DataConfig(**lines.data_config(character_dict=str(dictionary))), tmp_path / "out")
    data = open_data(tmp_path / "out")
    assert data.characters == tuple(CHINESE[::-1]) and data.num_classes == len(CHINESE) + 1
    assert data.references("test").tolist() == lines.test_texts and result.metrics["samples_test"] == 6
    assert result.metrics["samples_train"] + result.metrics["samples_calibration"] + \
        result.metrics["samples_validation"] == 30
    first = data.labels("test")[0]
    assert [data.characters[i - 1] for i in first[first > 0]] == list(lines.test_texts[0])


def test_digit_strings_use_each_source_digit_in_one_split_and_fit_the_shape(tmp_path):
    for shape in ([1, 32, 320], [1, 16, 128], [3, 32, 200]):
        config = DataConfig(dataset="digit_strings", transforms={"rec_image_shape": shape})
        result = run(config, tmp_path / str(shape[1] * shape[2] * shape[0]))
        data = open_data(tmp_path / str(shape[1] * shape[2] * shape[0]))
        assert data.task.name == "text_recognition" and data.characters == tuple("0123456789")
        assert sum(data.size(name) for name in SPLITS) == 2400 and data.input_shape == tuple(shape)
        sources = {name: set(data.arrays[f"sources_{name}"][data.arrays[f"sources_{name}"] >= 0].tolist())
                   for name in SPLITS}
        assert all(not (sources[a] & sources[b]) for i, a in enumerate(SPLITS) for b in SPLITS[i + 1:])
        images, ids = data.array("test")
        references = data.references("test")
        assert images.shape == (480, *shape) and images.dtype == np.float32 and ids.shape == (480, 8)
        assert decoded(ids, data.characters) == references.tolist()
        assert set(map(len, references)) == set(range(4, 9))
        # load_digits's convention: bright ink on a dark ground in [0, 1]; padded with the dark ground
        short = np.asarray([len(text) == 4 for text in references])
        assert images.min() == 0.0 and images.max() <= 1.0 and images[short][..., shape[2] // 2:].max() == 0.0
        assert result.metrics["max_text_length"] == 8 and result.metrics["num_classes"] == 11
    (tmp_path / "again").mkdir()  # the same config: the same bytes
    prepare_data(DataConfig(dataset="digit_strings", transforms={"rec_image_shape": [1, 32, 320]}), tmp_path / "again")
    assert (tmp_path / "again" / "splits.npz").read_bytes() == (tmp_path / "10240" / "splits.npz").read_bytes()


def test_digit_strings_that_cannot_fit_name_rec_image_shape():
    with pytest.raises(ConfigError, match="rec_image_shape .*cannot hold 16 digits"):
        validate_config({"task": "text_recognition", "train": {"architecture": "crnn"},
                         "data": {"dataset": "digit_strings", "digit_strings": {"max_digits": 16},
                                  "transforms": {"rec_image_shape": [1, 32, 200]}}})


@pytest.mark.parametrize("augment, message", [
    ({"horizontal_flip": True}, "cannot be flipped"), ({"crop_scale": [0.5, 1.0]}, "randomly cropped")])
def test_text_lines_refuse_flips_and_random_crops(tmp_path, augment, message):
    with pytest.raises(ValueError, match=message):
        DataConfig(dataset="text_lines", path=str(tmp_path), label_file="x.txt", augment=augment)


def _bad(tmp_path, text: str | bytes, **extra):
    """Prepare a dataset whose label file is `text`, expecting BadInput; returns the message."""
    lines = write_text_lines(tmp_path / "lines", lines=12)
    label_file = tmp_path / "lines" / "bad.txt"
    label_file.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BadInput) as caught:
        prepare_data(DataConfig(**{**lines.data_config(), "label_file": str(label_file), **extra}), out)
    assert not any(out.iterdir())  # nothing written
    assert caught.value.exit_code == 2
    return str(caught.value)


GOOD = "图片/行_000.png\t零壹\n图片/行_001.png\t贰叁\n"


@pytest.mark.parametrize("text, expected", [
    (GOOD + "图片/行_002.png 零壹\n", r"without a tab: .*bad.txt:3 .*a tab, not spaces"),
    (GOOD + "图片/行_002.png\t\n", r"empty label: .*bad.txt:3"),
    (GOOD + "图片/不存在.png\t零\n", r"do not exist: .*bad.txt:3 .*不存在.png"),
    (GOOD + "../图片/行_002.png\t零\n", r"outside data.path.*bad.txt:3 .*without `\.\.`"),
    (GOOD + "/etc/passwd\t零\n", r"outside data.path.*bad.txt:3"),
    ("图片/行_000.png\t零壹\n".encode() + "图片/行_001.png\t贰叁\n".encode("gbk"),
     r"not UTF-8: byte \d+ \(line 2\).*iconv"),
])
def test_bad_label_lines_are_named_before_anything_is_stored(tmp_path, text, expected):
    assert __import__("re").search(expected, _bad(tmp_path, text))


def test_a_character_missing_from_the_dictionary_is_named_or_skipped_and_listed(tmp_path):
    dictionary = write_dictionary(tmp_path / "dict.txt", CHINESE.replace("叁", ""))
    message = _bad(tmp_path, GOOD * 8, character_dict=str(dictionary))
    assert "bad.txt:2 '叁' (U+53C1)" in message and "unknown_chars: skip" in message

    lines = write_text_lines(tmp_path / "kept", lines=30)
    config = DataConfig(**lines.data_config(character_dict=str(dictionary), unknown_chars="skip"))
    result = run(config, tmp_path / "skipped")
    dropped = [number for number, text in enumerate(lines.texts, start=1) if "叁" in text]
    assert dropped and [item["line"].rsplit(":", 1)[1] for item in result.metrics["skipped_lines"]] == \
        [str(number) for number in dropped]
    assert all("叁" in item["reason"] for item in result.metrics["skipped_lines"])
    assert sum(result.metrics[f"samples_{name}"] for name in SPLITS) == 30 - len(dropped)


def test_a_line_too_wide_for_w_is_named_or_squeezed(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=20)
    line_image("零壹贰叁肆伍陆柒捌玖元角分零壹", 32).save(tmp_path / "lines" / "图片" / "长.png")
    with open(lines.label_file, "a", encoding="utf-8") as handle:
        handle.write("图片/长.png\t零壹贰叁肆伍陆柒捌玖元角分零壹\n")
    (tmp_path / "out").mkdir()
    wide = r"wider than W=320.*标签.txt:21 图片/长.png .*W >= 3\d\d.*too_wide: squeeze"
    with pytest.raises(BadInput, match=wide):
        prepare_data(DataConfig(**lines.data_config()), tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())

    result = run(DataConfig(**lines.data_config(too_wide="squeeze", validation_fraction=0)), tmp_path / "squeezed")
    assert result.metrics["squeezed_lines"] == [f"{lines.label_file}:21"]
    data = open_data(tmp_path / "squeezed")
    for name in SPLITS:
        images, _ = data.array(name)
        assert images.shape[1:] == (1, 32, 320)


def test_undecodable_images_stop_the_run_or_are_skipped_and_listed(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=20)
    (tmp_path / "lines" / "图片" / "行_001.png").write_bytes(b"not an image")
    with pytest.raises(BadInput, match=r"1 image\(s\) cannot be decoded: .*标签.txt:2 .*on_bad_image: skip"):
        plan_text_lines(DataConfig(**lines.data_config()))
    result = run(DataConfig(**lines.data_config(on_bad_image="skip")), tmp_path / "out")
    assert [item["line"] for item in result.metrics["skipped_lines"]] == [f"{lines.label_file}:2"]
    assert result.metrics["skipped_images"][0]["file"].endswith("行_001.png")


def test_the_table_digest_that_decides_reuse_follows_labels_and_bytes(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=20)
    config = DataConfig(**lines.data_config())
    state = HashState(tmp_path / "hashes.sqlite")
    first = plan_text_lines(config, state)
    assert plan_text_lines(config, state).table_sha256 == first.table_sha256  # unchanged: the stage is reused
    text = lines.label_file.read_text(encoding="utf-8")
    lines.label_file.write_text(text.replace(f"\t{lines.texts[0]}\n", f"\t{lines.texts[0]}零\n", 1), encoding="utf-8")
    relabelled = plan_text_lines(config, state)
    assert relabelled.table_sha256 != first.table_sha256
    image = tmp_path / "lines" / "图片" / "行_005.png"
    image.write_bytes(image.read_bytes() + b"\0")  # still a PNG, other bytes
    assert plan_text_lines(config, state).table_sha256 != relabelled.table_sha256


def test_a_line_image_changed_after_recording_is_named_when_read(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=20)
    run(DataConfig(**lines.data_config()), tmp_path / "out")
    data = open_data(tmp_path / "out")
    victim = data.files("test")[0]
    Image.new("L", (40, 32), 255).save(victim, format=Image.open(victim).format)
    with pytest.raises(DataChanged, match="行_"):
        data.array("test")


def test_training_lines_are_augmented_reproducibly_without_flips(tmp_path):
    lines = write_text_lines(tmp_path / "lines", lines=20)
    config = DataConfig(**lines.data_config(augment={"rotation_degrees": 3, "color_jitter": 0.3}))
    run(config, tmp_path / "out")
    data = open_data(tmp_path / "out")
    plain = next(data.fetch("train", [np.arange(4)]))
    first = next(data.fetch("train", [np.arange(4)], augment=True, epoch=1))
    second = next(data.fetch("train", [np.arange(4)], augment=True, epoch=1))
    assert first[0].shape == plain[0].shape and not np.allclose(first[0], plain[0])
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], plain[1])


def test_classification_records_name_their_task(tmp_path):
    result = run(DataConfig(), tmp_path / "digits")
    assert json.loads((tmp_path / "digits" / "dataset.json").read_text())["task"] == "classification"
    data = open_data(tmp_path / "digits")
    assert result.metrics["task"] == "classification" and data.task.name == "classification"
    assert np.array_equal(data.references("test"), data.labels("test"))
