"""PaddleOCR's PP-OCRv4 detector, trained elsewhere, gated on rendered document pages through `quantgate run`:
boxes scored by hmean in onnxruntime and OpenVINO, Paddle Inference's oneDNN INT8 refused with its failing op
named, and every bad page, label or model refused with the setting that fixes it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import paddleocr_models  # noqa: E402

from quantgate.artifacts import ArtifactStore  # noqa: E402
from quantgate.demo.pages import write_demo_dataset  # noqa: E402

PADDLEOCR_PAGE = {"color": "bgr", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                  "det_limit_side_len": 640, "det_canvas": [640, 640]}


@pytest.fixture(scope="module")
def models():
    return paddleocr_models()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """8 calibration/validation pages and 6 test pages (cheques, invoices, bank slips), PaddleOCR's det labels."""
    root = tmp_path_factory.mktemp("pages")
    write_demo_dataset(root, 14, seed=3, test_fraction=6 / 14)
    return root


def detector_config(models, root: Path, **data) -> dict:
    return {
        "task": "text_detection", "model_name": "ppocrv4-det",
        "trained_model": {"path": str(models.det)},
        "data": {"dataset": "text_boxes", "path": str(root), "label_file": str(root / "calibration.txt"),
                 "test_label_file": str(root / "test.txt"), "num_workers": 0,
                 "transforms": dict(PADDLEOCR_PAGE), **data},
        "quantize": {"strategy": "single", "batch_size": 4, "batch_nums": 1},
        "evaluate": {"latency_repeats": 3, "batch_size": 2, "runtimes": ["onnxruntime", "openvino"]},
        "gate": {"min_speedup": 0, "min_paired_samples": 4},
    }


def run_config(quantgate_cli, config: dict, folder: Path, store: Path):
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return quantgate_cli.run("run", "--config", str(path), "--store", str(store), timeout=900)


@pytest.fixture(scope="module")
def detector_run(quantgate_cli, models, pages, tmp_path_factory):
    folder = tmp_path_factory.mktemp("det-run")
    return run_config(quantgate_cli, detector_config(models, pages), folder, folder / "store"), folder


def test_ppocr_detector_is_gated_on_hmean_in_two_runtimes_and_released(detector_run):
    result, folder = detector_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "hmean_drop_pts" in result.stdout and "openvino.hmean_drop_pts" in result.stdout
    store = ArtifactStore(folder / "store")
    assert store.alias("ppocrv4-det", "release") == "v1"
    version = store.version("ppocrv4-det", "v1")
    metrics = store.read_manifest(store.stage_ref(version, "evaluate"))["metrics"]
    assert metrics["task"] == "text_detection" and metrics["accuracy_metric"] == "hmean"
    for runtime in ("onnxruntime", "openvino"):
        entry = metrics["runtimes"][runtime]
        # clean rendered pages: PP-OCRv4 finds (nearly) every line, FP32 and INT8 alike
        assert entry["fp32_hmean_pct"] >= 90 and entry["int8_hmean_pct"] >= 90, entry
        assert entry["fp32_boxes"] > 20 and entry["agreement"] >= 0.9
    gate = json.loads((store.verify_stage(store.stage_ref(version, "gate")) / "gate.json").read_text())
    names = {criterion["name"] for criterion in gate["criteria"]}
    assert {"hmean_drop_pts", "openvino.hmean_drop_pts"} <= names and "accuracy_drop_pts" not in names
    report = (store.verify_stage(store.stage_ref(version, "report")) / "report.md").read_text(encoding="utf-8")
    assert "## Text boxes (test pages, IoU > 0.5)" in report and "| hmean |" in report


def test_a_second_run_is_judged_against_the_release_on_the_same_pages(quantgate_cli, models, pages, detector_run):
    _, folder = detector_run
    result = run_config(quantgate_cli, detector_config(models, pages), folder, folder / "store")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "release_regression_pts = 0 pts" in result.stdout  # the same model on the same pages: no regression


def test_paddle_inference_int8_names_the_op_it_cannot_run(quantgate_cli, models, pages, detector_run):
    _, folder = detector_run
    config = detector_config(models, pages)
    config["evaluate"]["runtimes"] = ["onnxruntime", "paddle_inference"]
    result = run_config(quantgate_cli, config, folder, folder / "store")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "paddle_inference (oneDNN INT8) cannot run" in result.stderr and "conv2d_transpose" in result.stderr
    assert "nothing fell back" in result.stderr


def _label_line(root: Path, number: int) -> tuple[str, list]:
    path, label = (root / "test.txt").read_text(encoding="utf-8").splitlines()[number].split("\t")
    return path, json.loads(label)


def test_a_label_that_is_not_json_exits_2_naming_its_line(quantgate_cli, models, pages, tmp_path):
    path, _ = _label_line(pages, 0)
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{path}\t[{{\"transcription\": \"x\", \"points\": [[1, 2], [3, 4]\n", encoding="utf-8")
    config = detector_config(models, pages, test_label_file=str(bad))
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "bad.txt:1" in result.stderr and "JSON" in result.stderr
    assert not (tmp_path / "store" / "ppocrv4-det" / "aliases" / "release.json").exists()


def test_a_box_outside_its_page_exits_2_naming_the_point(quantgate_cli, models, pages, tmp_path):
    path, boxes = _label_line(pages, 1)
    boxes[0]["points"][1] = [5000, boxes[0]["points"][1][1]]
    bad = tmp_path / "outside.txt"
    bad.write_text(f"{path}\t{json.dumps(boxes, ensure_ascii=False)}\n", encoding="utf-8")
    result = run_config(quantgate_cli, detector_config(models, pages, test_label_file=str(bad)), tmp_path,
                        tmp_path / "store")
    assert result.returncode == 2 and "outside.txt:1" in result.stderr and "[5000," in result.stderr


def test_a_page_larger_than_the_canvas_says_which_setting_fixes_it(quantgate_cli, models, pages, tmp_path):
    config = detector_config(models, pages)
    config["data"]["transforms"]["det_limit_side_len"] = 960  # pages up to 960 px, canvas 640
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "larger than data.transforms.det_canvas [640, 640]" in result.stderr
    assert "det_limit_side_len to 640" in result.stderr


def test_a_detector_given_to_text_recognition_is_named_by_its_output(quantgate_cli, models, tmp_path):
    lines = tmp_path / "lines"
    lines.mkdir()
    config = {"task": "text_recognition", "model_name": "wrong", "trained_model": {"path": str(models.det)},
              "data": {"dataset": "text_lines", "path": str(lines), "label_file": str(lines / "x.txt"),
                       "character_dict": str(models.keys), "use_space_char": True,
                       "transforms": {"rec_image_shape": [3, 48, 320], "color": "bgr"}}}
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "a text detector's [N, 1, H, W] probability map" in result.stderr
    assert "set task: text_detection" in result.stderr
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("versions/v*"))


def test_a_recognizer_given_to_text_detection_is_named_by_its_output(quantgate_cli, models, pages, tmp_path):
    config = detector_config(models, pages)
    config["trained_model"] = {"path": str(models.rec)}
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "task text_detection needs a DB detector's [N, 1, H, W] probability map" in result.stderr
    assert "recognizer's [N, T, C]" in result.stderr


def test_training_a_detector_is_refused_as_out_of_scope(quantgate_cli, pages, tmp_path):
    config = {"task": "text_detection", "data": {"dataset": "text_boxes", "path": str(pages),
                                                 "label_file": str(pages / "test.txt")}}
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2 and "training a text detector is out of scope" in result.stderr
