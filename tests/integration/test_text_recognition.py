"""Text-line recognition end to end, as a user runs it: PaddleOCR-layout lines with Chinese labels and file
names through `quantgate run`, then `quantgate bundle` and `quantgate predict` on the test images; and the
built-in digit strings through the release flow with a bidirectional-LSTM neck."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from text_lines import CHINESE, write_dictionary, write_text_lines  # noqa: E402

from quantgate.artifacts import ArtifactStore  # noqa: E402
from quantgate.cli import main  # noqa: E402
from quantgate.samples.reading import open_data  # noqa: E402
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE  # noqa: E402

MODEL = "cheques"
PLUMBING = {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0, "max_cer_increase_pts": 100,
            "min_paired_samples": 2}


@pytest.fixture(scope="module")
def cheques(quantgate_cli, tmp_path_factory):
    """One `quantgate run` over Chinese text lines with a separate test label file and a given dictionary."""
    base = tmp_path_factory.mktemp("ocr")
    lines = write_text_lines(base / "数据", lines=60, test_lines=16, height=24)
    dictionary = write_dictionary(base / "dict.txt", CHINESE)
    config = base / "cheques.yaml"
    config.write_text(yaml.safe_dump({
        "task": "text_recognition", "model_name": MODEL,
        "data": lines.data_config(character_dict=str(dictionary), num_workers=0,
                                  transforms={"rec_image_shape": [1, 16, 96]}),
        "train": {"architecture": "crnn", "epochs": 2, "batch_size": 8},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 8},
        "evaluate": {"latency_repeats": 3},
        "gate": PLUMBING,
    }, allow_unicode=True), encoding="utf-8")
    root = base / "store"
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(root))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    store = ArtifactStore(root)
    version = store.version(MODEL, "v1")
    return store, version, lines, result.stdout


def test_text_lines_run_reports_line_accuracy_cer_and_the_strings_that_differ(cheques):
    store, version, lines, printed = cheques
    assert "line acc  FP32" in printed and "CER       FP32" in printed and "cer_increase_pts" in printed
    record = store.version_record(version)
    metrics = record["metrics"]
    assert metrics["task"] == "text_recognition" and metrics["accuracy_metric"] == "line accuracy"
    assert {"fp32_cer_pct", "int8_cer_pct", "cer_increase_pts"} <= set(metrics)
    assert "cer_increase_pts" in [criterion["name"] for criterion in record["gate"]["criteria"]]
    data = open_data(store.verify_stage(store.finalized_stage_ref(version, "data")))
    assert data.spec["characters"] == list(CHINESE)  # the given dictionary, in its order
    assert list(data.references("test")) == lines.test_texts  # the test label file, in its order
    report = (store.stage_dir(version, "report") / "report.md").read_text(encoding="utf-8")
    assert "## Character errors" in report and "Fonts:" in report


def test_a_text_bundle_predicts_the_lines_the_gate_judged(cheques, tmp_path, capsys):
    store, version, _, _ = cheques
    out = tmp_path / "bundle"
    assert main(["bundle", "release", "--out", str(out), "--store", str(store.root)]) == 0
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["task"] == "text_recognition"
    assert (out / "characters.txt").read_text(encoding="utf-8").split("\n")[:len(CHINESE)] == list(CHINESE)
    data = open_data(store.verify_stage(store.finalized_stage_ref(version, "data")))
    with np.load(store.verify_stage(store.finalized_stage_ref(version, "evaluate")) / PREDICTIONS_FILE) as stored:
        int8_pred = stored["int8_pred"].tolist()
    capsys.readouterr()
    assert main(["predict", str(out), *data.files("test"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [line["text"] for line in printed["predictions"]] == int8_pred


def test_digit_strings_with_a_bilstm_neck_run_through_the_release_flow(quantgate_cli, tmp_path):
    config = tmp_path / "digits.yaml"
    config.write_text(yaml.safe_dump({
        "task": "text_recognition", "model_name": "amounts",
        "data": {"dataset": "digit_strings", "digit_strings": {"lines": 200, "min_digits": 2, "max_digits": 4},
                 "transforms": {"rec_image_shape": [1, 16, 96]}},
        "train": {"architecture": "crnn", "neck": "bilstm", "epochs": 1, "batch_size": 16},
        "quantize": {"strategy": "search", "search": {"max_trials": 2, "latency_repeats": 3}},
        "evaluate": {"latency_repeats": 3},
        "gate": PLUMBING,
    }))
    root = tmp_path / "store"
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(root))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    store = ArtifactStore(root)
    version = store.version("amounts", "v1")
    trained = store.read_manifest(store.finalized_stage_ref(version, "train"))["metrics"]
    assert trained["neck"] == "bilstm"
    precision = json.loads((store.stage_dir(version, "train") / "op_precision.json").read_text())
    assert "warpctc" in json.dumps(precision)
    evaluated = store.read_manifest(store.finalized_stage_ref(version, "evaluate"))["metrics"]
    assert evaluated["task"] == "text_recognition" and evaluated["test_samples"] > 0
    # PaddleSlim leaves the LSTM in float: the evaluation says so, with its share of the INT8 model's time.
    float_layers = evaluated["runtimes"]["onnxruntime"]["int8_float_layers"]
    assert float_layers["layers"] == {"LSTM": 1} and 0 < float_layers["kernel_time_share"]["LSTM"] < 1
    report = (store.stage_dir(version, "report") / "report.md").read_text(encoding="utf-8")
    assert "Float layers in the INT8 model (onnxruntime): LSTM x1" in report


def test_an_int8_model_whose_layers_all_run_integer_kernels_records_no_float_layers(cheques):
    store, version, _, _ = cheques
    evaluated = store.read_manifest(store.finalized_stage_ref(version, "evaluate"))["metrics"]
    assert "int8_float_layers" not in evaluated["runtimes"]["onnxruntime"]
