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
        "evaluate": {"latency_repeats": 3, "batch_size": 2, "latency_batch_size": 2,
                     "runtimes": ["onnxruntime", "openvino"]},
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


# ---- the OCR system: the detector above and a recognizer, both released in one store -------------------------

@pytest.fixture(scope="module")
def recognizer_run(quantgate_cli, models, detector_run, tmp_path_factory):
    """PP-OCRv4 rec gated into the detector's store (16 calibration lines, 16 test lines)."""
    from support.ocr_samples import render_financial_lines, write_label_file

    _, folder = detector_run
    root = tmp_path_factory.mktemp("lines")
    entries = render_financial_lines(root, 32, seed=7)
    write_label_file(root / "calibration.txt", entries[:16])
    write_label_file(root / "test.txt", entries[16:])
    config = {
        "task": "text_recognition", "model_name": "ppocrv4-rec", "trained_model": {"path": str(models.rec)},
        "data": {"dataset": "text_lines", "path": str(root), "label_file": str(root / "calibration.txt"),
                 "test_label_file": str(root / "test.txt"), "character_dict": str(models.keys),
                 "use_space_char": True, "num_workers": 0,
                 "transforms": {"rec_image_shape": [3, 48, 320], "color": "bgr", "mean": [0.5], "std": [0.5],
                                "line_padding": "zero"}},
        "quantize": {"strategy": "single", "batch_size": 8},
        "evaluate": {"latency_repeats": 3, "batch_size": 8, "latency_batch_size": 8,
                     "runtimes": ["onnxruntime", "openvino"]},
        "gate": {"min_speedup": 0, "max_accuracy_drop": 20, "min_agreement": 0.5, "max_cer_increase_pts": 10},
    }
    result = run_config(quantgate_cli, config, tmp_path_factory.mktemp("rec-config"), folder / "store")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder


def system_config(pages: Path, **system) -> dict:
    return {"task": "ocr_system", "model_name": "ppocrv4-system",
            "system": {"detector": "ppocrv4-det", "recognizer": "ppocrv4-rec", **system},
            "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "test.txt"),
                     "num_workers": 0},
            "evaluate": {"runtimes": ["onnxruntime", "openvino"]},
            # rendered lines wider than 320 px are squeezed: the gate here proves the mechanics, not the model
            "gate": {"min_speedup": 0, "min_agreement": 0.5, "max_e2e_line_drop_pts": 20, "max_cer_increase_pts": 20,
                     "min_paired_samples": 4}}


@pytest.fixture(scope="module")
def system_run(quantgate_cli, pages, recognizer_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("system-config")
    return run_config(quantgate_cli, system_config(pages), folder, recognizer_run / "store"), recognizer_run


def test_the_system_is_judged_end_to_end_in_every_mix_and_released(quantgate_cli, system_run):
    result, folder = system_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "e2e_line_drop_pts" in result.stdout and "openvino.e2e_line_drop_pts" in result.stdout
    store = ArtifactStore(folder / "store")
    assert store.alias("ppocrv4-system", "release") == "v1"
    version = store.version("ppocrv4-system", "v1")
    record = store.version_record(version)
    assert record["system"]["detector"] == {"model": "ppocrv4-det", "version": "v2", "task": "text_detection",
                                            "outputs": "probabilities"}
    assert record["system"]["recognizer"]["version"] == "v1" and record["system"]["classifier"] is None
    metrics = store.read_manifest(store.stage_ref(version, "evaluate"))["metrics"]
    assert metrics["test_samples"] == 6 and metrics["gt_lines"] > 30
    for runtime in ("onnxruntime", "openvino"):
        systems = metrics["runtimes"][runtime]["systems"]
        assert set(systems) == {"det:fp32+rec:fp32", "det:fp32+rec:int8", "det:int8+rec:fp32", "det:int8+rec:int8"}
        reference = systems["det:fp32+rec:fp32"]
        assert reference["scores"]["e2e_line_accuracy_pct"] >= 60, reference["scores"]  # squeezed lines miss some
        assert reference["latency_ms_p50"] > reference["detection_ms_p50"] > 0
        assert "vs_fp32" in systems["det:int8+rec:int8"] and "vs_fp32" not in reference
    report = store.verify_stage(store.stage_ref(version, "report"))
    assert (report / "page.png").stat().st_size > 10_000
    assert "## Which model loses which lines" in (report / "report.md").read_text(encoding="utf-8")
    listed = quantgate_cli.run("versions", "--store", str(folder / "store"), "--model", "ppocrv4-system")
    assert listed.returncode == 0 and "v1" in listed.stdout, listed.stdout + listed.stderr


def test_a_second_system_is_paired_with_the_release_on_the_same_pages(quantgate_cli, pages, system_run, tmp_path):
    _, folder = system_run
    result = run_config(quantgate_cli, system_config(pages), tmp_path, folder / "store")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "release_regression_pts = 0 pts (must be <= 1) ok: vs release v1 on 6 paired pages" in result.stdout
    assert ArtifactStore(folder / "store").alias("ppocrv4-system", "release") == "v2"


def _no_system_version(store: Path) -> bool:
    return not (store / "ppocrv4-system" / "versions" / "v3").exists()


def test_a_component_of_the_wrong_task_is_named_and_nothing_is_stored(quantgate_cli, pages, system_run, tmp_path):
    _, folder = system_run
    config = system_config(pages, detector="ppocrv4-rec", classifier="ppocrv4-det")
    result = run_config(quantgate_cli, config, tmp_path, folder / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "system.detector: ppocrv4-rec/v1 is a text_recognition model, not text_detection" in result.stderr
    assert "system.classifier: ppocrv4-det/v" in result.stderr  # its release (v2 after the second run above)
    assert "is a text_detection model, not classification" in result.stderr
    assert _no_system_version(folder / "store")


def test_a_component_that_is_missing_or_not_released_is_named(quantgate_cli, pages, system_run, tmp_path):
    _, folder = system_run
    # v3 of the detector is the paddle_inference run above, which ended in error
    config = system_config(pages, detector="ppocrv4-det/v3", recognizer="no-such-model")
    result = run_config(quantgate_cli, config, tmp_path, folder / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "system.detector: ppocrv4-det/v3 did not pass its gate (status 'error')" in result.stderr
    assert "system.recognizer: 'no-such-model'" in result.stderr
    assert _no_system_version(folder / "store")


def test_paddle_inference_is_refused_for_a_system_before_anything_runs(quantgate_cli, pages, tmp_path):
    config = system_config(pages)
    config["evaluate"]["runtimes"] = ["onnxruntime", "paddle_inference"]
    result = run_config(quantgate_cli, config, tmp_path, tmp_path / "store")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "evaluate.runtimes: paddle_inference is not offered for OCR systems" in result.stderr
    assert not (tmp_path / "store" / "ppocrv4-system").exists()
