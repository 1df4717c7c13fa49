"""A text task's default validation split holds 300 lines when the data allow (enough to show an agreement of
0.99), calibration keeps its floor of 256, and the run summary says when the data cannot."""

from pathlib import Path

import pytest
from text_lines import CHINESE, write_dictionary, write_text_lines

from quantgate.cli.run import search_lines
from quantgate.config import DataConfig, GatePolicy, validate_config
from quantgate.samples.file_table import read_table
from quantgate.stages.data import plan_text_lines, prepare_data
from quantgate.stages.quantize.validation_check import samples_to_show


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """556 labelled lines for calibration and validation, 20 test lines in a file of their own, the dictionary."""
    root = tmp_path_factory.mktemp("lines")
    lines = write_text_lines(root / "数据", lines=556, test_lines=20, lengths=(2, 3), height=16)
    return lines, write_dictionary(root / "keys.txt", CHINESE)


def trained_model_data(labelled, label_file: Path | None = None, **extra) -> DataConfig:
    """A trained model's data section: nothing trains, validation_fraction left at its default unless given."""
    lines, keys = labelled
    return DataConfig(dataset="text_lines", path=str(lines.root), label_file=str(label_file or lines.label_file),
                      test_label_file=str(lines.test_label_file), character_dict=str(keys),
                      transforms={"rec_image_shape": [1, 16, 320]}, num_workers=0, **extra)


def split(config: DataConfig, out: Path) -> dict:
    out.mkdir()
    return prepare_data(config, out, plan_text_lines(config, training=False), training=False).metrics


def test_556_labelled_lines_validate_on_300_and_calibrate_on_256(labelled, tmp_path):
    metrics = split(trained_model_data(labelled), tmp_path / "data")
    assert (metrics["samples_validation"], metrics["samples_calibration"], metrics["samples_test"]) == (300, 256, 20)
    rule = metrics["validation_rule"]
    assert rule["lines"] == 300 and rule["wanted"] == 300 and not rule["short"]
    assert rule["rule"].startswith("at least 300 lines (text default)")
    assert "at least 300 lines" in metrics["split_rule"]


def test_400_lines_keep_the_calibration_floor_and_the_record_and_summary_say_the_data_cannot(labelled, tmp_path):
    lines, _ = labelled
    fewer = tmp_path / "fewer.txt"
    fewer.write_text("".join(lines.label_file.read_text(encoding="utf-8").splitlines(True)[:400]), encoding="utf-8")
    metrics = split(trained_model_data(labelled, label_file=fewer), tmp_path / "data")
    assert (metrics["samples_validation"], metrics["samples_calibration"]) == (144, 256)
    rule = metrics["validation_rule"]
    assert rule["short"] and rule["lines"] == 144
    assert "calibration floor of 256" in rule["rule"] and "leaves 144 for validation" in rule["rule"]

    # The run summary, from the search record the quantize stage keeps for this split under a 0.99 policy.
    needed = samples_to_show(GatePolicy(min_agreement=0.99, max_accuracy_drop=1.0), metrics["samples_validation"])
    search = {"passed": True, "kept_trial": 1, "trials": 1, "recipe": {"algo": "hist"}, "float_layers": [],
              "validation": {"accuracy_drop_pts": 0.0}, "wall_s": 1.0, "stopped": "passed",
              "policy_min_agreement": 0.99, "policy_max_accuracy_drop_pts": 1.0,
              "validation_samples_needed": needed}
    summary = search_lines({"search": search, "metrics": {"task": "text_recognition"}})
    assert summary[-1].replace("\n", " ").replace(" " * 12, "").startswith(
        "  validation 144 lines: too few to show agreement 0.99 (needs 300); add labelled lines")


def test_an_explicit_validation_fraction_is_honoured(labelled, tmp_path):
    metrics = split(trained_model_data(labelled, validation_fraction=0.2), tmp_path / "data")
    assert metrics["samples_validation"] == 116  # 0.2 of the 576 lines, as before the text default
    assert metrics["samples_calibration"] == 556 - 116
    assert metrics["validation_rule"]["rule"] == "data.validation_fraction=0.2 (set): 116 lines"
    assert not metrics["validation_rule"]["short"]


def test_a_policy_change_re_splits_nothing(labelled, tmp_path):
    raw = {"task": "text_recognition", "trained_model": {"path": str(tmp_path)},
           "data": trained_model_data(labelled).model_dump(mode="json", exclude_defaults=True)}
    loose = validate_config({**raw, "gate": {"min_agreement": 0.95}})
    strict = validate_config({**raw, "gate": {"min_agreement": 0.999}})
    # The data stage's reuse digest is its section's settings: the same under either policy.
    assert loose.data.model_dump(mode="json") == strict.data.model_dump(mode="json")
    first, second = split(loose.data, tmp_path / "loose"), split(strict.data, tmp_path / "strict")
    assert first["fingerprint_sha256"] == second["fingerprint_sha256"]
    assert read_table(tmp_path / "loose" / "files.csv.gz") == read_table(tmp_path / "strict" / "files.csv.gz")


def test_classification_keeps_its_default_split(tmp_path):
    default, explicit = DataConfig(), DataConfig(validation_fraction=0.1)
    assert default.validation_fraction == 0.1 and default.model_dump() == explicit.model_dump()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours, before = prepare_data(default, tmp_path / "a").metrics, prepare_data(explicit, tmp_path / "b").metrics
    assert ours["fingerprint_sha256"] == before["fingerprint_sha256"]  # the split indices are in the fingerprint
    assert [ours[f"samples_{name}"] for name in ("train", "calibration", "validation", "test")] == [987, 270, 180, 360]
    assert ours["validation_rule"] == {"rule": "data.validation_fraction=0.1: 180 samples", "lines": 180,
                                       "wanted": None, "short": False}
