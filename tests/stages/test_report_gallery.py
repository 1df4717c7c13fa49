"""The report people look at: class names, confusion matrices, the samples where INT8 and FP32 disagree, the
per-character errors of a text recognizer, and a picture font that can draw Chinese (or says it cannot).

Each test builds a data stage's folder (dataset.json + splits.npz, as the data stage writes for in-memory
datasets) and an evaluate stage's predictions.npz by hand: no training."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from quantgate.pictures import fonts
from quantgate.samples.reading import StoredData
from quantgate.stages.report.errors import ReportError
from quantgate.stages.report.markdown import report

SPLITS = ("train", "calibration", "validation", "test")
ANIMALS = ["cat", "dog", "bird"]
# test rows 2, 5 and 7 disagree: INT8 wrong / FP32 right at 5 and 7, INT8 right / FP32 wrong at 2
TRUTH = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
FP32 = np.array([0, 1, 0, 0, 1, 2, 0, 1, 2, 0])
INT8 = np.array([0, 1, 2, 0, 1, 0, 0, 2, 2, 0])
# Reference lines of a Chinese amount recognizer; rows 1 and 3 disagree.
LINES = np.array(["壹佰元", "贰拾3元", "叁仟", "4元5角", "伍"])
LINES_FP32 = np.array(["壹佰元", "贰拾3元", "叁仟", "4元角", "伍"])
LINES_INT8 = np.array(["壹佰元", "贰拾8元", "叁仟", "4元5角", "伍"])


def data_folder(folder, spec: dict, images: np.ndarray, labels: np.ndarray, texts: np.ndarray | None = None):
    """A data stage's folder for an in-memory dataset whose test split is `images`, `labels` (and, for text
    recognition, the lines `texts`)."""
    folder.mkdir()
    (folder / "dataset.json").write_text(json.dumps({"kind": "arrays", "seed": 0, "transforms": {},
                                                     "input_shape": list(images.shape[1:]), **spec}))
    arrays = {}
    for split in SPLITS:
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images, labels
        arrays[f"index_{split}"] = np.arange(len(images)) + 100
        if texts is not None:
            arrays[f"text_{split}"] = texts
    np.savez(folder / "splits.npz", **arrays)
    return folder


def predictions_folder(folder, references, fp32, int8):
    folder.mkdir()
    np.savez(folder / "predictions.npz", labels=references, fp32_pred=fp32, int8_pred=int8,
             fp32_logits=np.zeros((len(fp32), 1), np.float32), int8_logits=np.zeros((len(int8), 1), np.float32))
    return folder


def steps_csv(folder):
    path = folder / "steps.csv"
    path.write_text("step,epoch,loss,loss_scale\n" + "".join(f"{i},{1 + i // 5},{2.0 / i},1.0\n" for i in range(1, 11)))
    return path


def images(count: int, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct images: sample k is a bar at a place of its own."""
    pixels = np.zeros((count, *shape), np.float32)
    for k in range(count):
        pixels[k, :, :, (3 * k) % shape[-1]] = 1.0
    return pixels


def classification_run(tmp_path, classes=ANIMALS, fp32=FP32, int8=INT8):
    data = data_folder(tmp_path / "data", {"dataset": "animals", "classes": classes, "num_classes": len(classes)},
                       images(len(TRUTH), (3, 16, 16)), TRUTH)
    evaluate = predictions_folder(tmp_path / "evaluate", TRUTH, fp32, int8)
    return data, evaluate


def text_run(tmp_path):
    characters = sorted(set("".join(LINES)))
    ids = np.array([[characters.index(c) + 1 for c in line] + [0] * (6 - len(line)) for line in LINES], np.int64)
    data = data_folder(tmp_path / "data", {"task": "text_recognition", "dataset": "text_lines",
                                           "characters": characters, "num_classes": len(characters) + 1,
                                           "max_text_length": 6}, images(len(LINES), (1, 32, 320)), ids, LINES)
    return data, predictions_folder(tmp_path / "evaluate", LINES, LINES_FP32, LINES_INT8)


def write_report(tmp_path, data, evaluate, evaluation=None):
    out = tmp_path / "report"
    out.mkdir()
    result = report("m v3", evaluation or {}, {"passed": True, "criteria": []}, {}, steps_csv(tmp_path), {}, out,
                    data_dir=data, evaluate_dir=evaluate)
    return result, (out / "report.md").read_text(), out


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after `heading` (header and rule dropped)."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def no_font_search(monkeypatch):
    """As on a machine without CJK fonts: only matplotlib's default font is considered."""
    monkeypatch.setattr(fonts, "installed_fonts", lambda: [])


def test_the_classification_report_names_the_classes_and_shows_the_confusion_matrix(tmp_path):
    evaluation = {"per_class_top1_pct_fp32": [100.0, 100.0, 66.7], "per_class_top1_pct_int8": [100.0, 66.7, 66.7]}
    result, text, out = write_report(tmp_path, *classification_run(tmp_path), evaluation)
    assert "| top-1 accuracy |" in text and "character error rate" not in text
    assert table_rows(text, "## Per-class top-1 (%)") == [["cat", "100.00", "100.00", "+0.00"],
                                                          ["dog", "100.00", "66.70", "-33.30"],
                                                          ["bird", "66.70", "66.70", "+0.00"]]
    assert "| true \\ predicted | cat | dog | bird |" in text
    # INT8's counts, FP32's beside them where they differ: bird taken for cat once by each, at other rows
    assert table_rows(text, "## Confusion matrix") == [["cat", "4", "0", "0"], ["dog", "0", "**2** (3)", "**1** (0)"],
                                                       ["bird", "1", "0", "2"]]
    assert result.plot_files == ("training.png", "per_class.png", "confusion.png", "disagreements.png")
    assert result.metrics["disagreements"] == 3 and result.metrics["font"] == "DejaVu Sans"
    assert "Fonts: Strings in the pictures are drawn with DejaVu Sans (matplotlib's default font)" in text
    for name in result.plot_files:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 5_000


def test_the_gallery_lists_exactly_the_disagreeing_images_and_reads_only_them(tmp_path, monkeypatch):
    fetched = []
    original = StoredData.fetch

    def recording_fetch(self, split, index_batches, *args, **kwargs):
        batches = [list(map(int, batch)) for batch in index_batches]
        fetched.append((split, batches))
        return original(self, split, batches, *args, **kwargs)

    monkeypatch.setattr(StoredData, "fetch", recording_fetch)
    _, text, out = write_report(tmp_path, *classification_run(tmp_path))
    # quantization's errors (INT8 wrong, FP32 right) first, then the one INT8 fixed
    assert table_rows(text, "## Where INT8 and FP32 disagree") == [
        ["1", "5", "animals[105]", "bird", "cat", "bird", "FP32"],
        ["2", "7", "animals[107]", "dog", "bird", "dog", "FP32"],
        ["3", "2", "animals[102]", "cat", "bird", "bird", "INT8"]]
    assert "INT8 and FP32 disagree on 3 of 10 test images. Of those shown, FP32 is right on 2, INT8 on 1" in text
    assert "![Test images where INT8 and FP32 disagree](disagreements.png)" in text
    assert fetched == [("test", [[5, 7, 2]])]  # the gallery's rows only, never the whole split
    assert (out / "disagreements.png").stat().st_size > 5_000


def test_when_int8_and_fp32_agree_everywhere_the_report_says_so_instead_of_a_gallery(tmp_path):
    result, text, out = write_report(tmp_path, *classification_run(tmp_path, fp32=FP32, int8=FP32))
    assert "INT8 and FP32 predict the same for all 10 test images: there is nothing to show." in text
    assert "disagreements.png" not in text and not (out / "disagreements.png").exists()
    assert "disagreements.png" not in result.plot_files and result.metrics["disagreements"] == 0


def test_class_names_that_look_like_markup_are_shown_as_written(tmp_path):
    result, text, out = write_report(tmp_path, *classification_run(tmp_path, classes=["$\\frac$", "a|b", "c"]))
    assert "| true \\ predicted | $\\frac$ | a\\|b | c |" in text  # drawn without mathtext, escaped in tables
    assert (out / "disagreements.png").exists() and result.metrics["font"] == "DejaVu Sans"


def test_many_classes_get_their_most_frequent_confusions_instead_of_the_whole_matrix():
    from quantgate.stages.report.confusion import confusion_markdown

    names = [f"class {k}" for k in range(20)]
    fp32, int8 = np.diag(np.full(20, 5)), np.diag(np.full(20, 5))
    fp32[3, 7], int8[3, 7], int8[11, 2] = 1, 4, 2
    lines = confusion_markdown(names, fp32, int8)
    assert lines[2].startswith("The 2 most frequent confusions of 2")
    assert lines[-2:] == ["| class 3 | class 7 | 4 | 1 |", "| class 11 | class 2 | 2 | 0 |"]


def test_chinese_class_names_without_a_cjk_font_stay_in_the_markdown(tmp_path, monkeypatch):
    no_font_search(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Glyph missing" warning may reach the terminal
        result, text, out = write_report(tmp_path, *classification_run(tmp_path, classes=["猫", "狗", "鸟"]))
    assert "| true \\ predicted | 猫 | 狗 | 鸟 |" in text and ["1", "5", "animals[105]", "鸟", "猫", "鸟", "FP32"] in \
        table_rows(text, "## Where INT8 and FP32 disagree")
    assert "Fonts: No installed font has the characters 狗, 猫, 鸟, so the pictures show row numbers" in text
    assert result.metrics["font"] is None and (out / "disagreements.png").exists()


def test_the_text_report_shows_disagreeing_lines_and_character_errors(tmp_path, monkeypatch):
    no_font_search(monkeypatch)
    evaluation = {"accuracy_metric": "line accuracy", "fp32_top1_pct": 80.0, "int8_top1_pct": 80.0,
                  "fp32_cer_pct": 6.25, "int8_cer_pct": 6.25, "cer_increase_pts": 0.0}
    result, text, out = write_report(tmp_path, *text_run(tmp_path), evaluation)
    assert "| line accuracy | 80.00 % | 80.00 % |" in text
    assert "| character error rate | 6.25 % | 6.25 % | +0.00 pts |" in text
    assert table_rows(text, "## Where INT8 and FP32 disagree") == [
        ["1", "1", "text_lines[101]", "`贰拾3元`", "`贰拾8元`", "`贰拾3元`", "FP32"],
        ["2", "3", "text_lines[103]", "`4元角`", "`4元5角`", "`4元5角`", "INT8"]]
    assert table_rows(text, "## Character errors")[:2] == [["`3`", "1", "0 (0.0 %)", "1 (100.0 %)", "+1"],
                                                          ["`5`", "1", "1 (100.0 %)", "0 (0.0 %)", "-1"]]
    assert "per_class.png" not in result.plot_files and not (out / "per_class.png").exists()
    assert result.plot_files == ("training.png", "disagreements.png") and "Per-class" not in text
    assert "Fonts: No installed font has the characters" in text and "see table row" not in text


def test_text_lines_are_drawn_with_the_packaged_cjk_font_on_any_machine(tmp_path):
    chosen = fonts.choose_font(LINES)  # quantgate installs its own CJK font: no skip on a machine without one
    assert chosen.draws_strings and chosen.path == str(fonts.packaged_cjk_font()), chosen
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result, text, _ = write_report(tmp_path, *text_run(tmp_path))
    assert f"Fonts: Strings in the pictures are drawn with {chosen.name} (`{chosen.path}`)" in text
    assert result.metrics["font"] == chosen.name


def test_a_font_is_chosen_only_if_it_has_every_character(tmp_path):
    assert fonts.choose_font(["cat", "4元5角"], candidates=[]).missing == "元角"
    assert fonts.choose_font(["12.50"], candidates=[]).default
    unreadable = tmp_path / "broken.ttf"
    unreadable.write_bytes(b"not a font")
    assert not fonts.choose_font(["元"], candidates=[str(unreadable)]).draws_strings
    # matplotlib's "Last Resort" font maps every character to a picture of its Unicode block: never chosen
    last_resort = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "LastResortHE-Regular.ttf"
    assert last_resort.exists() and not fonts.choose_font(["元"], candidates=[str(last_resort)]).draws_strings


def test_glyph_warnings_are_counted_not_shown_and_other_warnings_pass():
    with pytest.warns(RuntimeWarning, match="other"), fonts.glyph_warnings_counted() as glyphs:
        warnings.warn("Glyph 20803 (\\N{CJK UNIFIED IDEOGRAPH-5143}) missing from font(s) DejaVu Sans.")
        warnings.warn("other", RuntimeWarning)
    assert len(glyphs) == 1


def test_predictions_that_do_not_match_the_test_split_are_refused(tmp_path):
    data, _ = classification_run(tmp_path)
    evaluate = predictions_folder(tmp_path / "short", TRUTH[:4], FP32[:4], INT8[:4])
    with pytest.raises(ReportError, match="holds \\[4\\] predictions, the data stage's test split 10 samples"):
        write_report(tmp_path, data, evaluate)
    shuffled = predictions_folder(tmp_path / "shuffled", TRUTH[::-1], FP32, INT8)
    with pytest.raises(ReportError, match="not the data stage's test labels"):
        write_report(tmp_path / "shuffled", data, shuffled)
