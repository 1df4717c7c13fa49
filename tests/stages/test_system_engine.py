"""The OCR system engine with PaddleOCR's real models (PP-OCRv4 detector and recognizer, mobile v2 direction
classifier) on rendered demo pages, in onnxruntime and OpenVINO.

The pipeline's real INT8 models come from its quantize and convert stages; here the "int8" forms are the FP32
ONNX files again, so every mixed system must read exactly what the all-FP32 one reads: any difference would be
the engine's, not quantization's.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import paddleocr_models  # noqa: E402

from quantgate.config import TransformsConfig  # noqa: E402
from quantgate.demo.pages import render_pages  # noqa: E402
from quantgate.ocr.combos import (  # noqa: E402
    FP32,
    INT8,
    LATENCY_P50,
    SPEEDUP,
    all_combos,
    combo_name,
    system_metrics,
    uniform,
)
from quantgate.ocr.engine import (  # noqa: E402
    ClassifierSpec,
    DetectorSpec,
    ModelFiles,
    RecognizerSpec,
    SystemModels,
    SystemRunner,
    line_confidence,
    run_systems,
)
from quantgate.ocr.matching import compare_systems, system_scores  # noqa: E402
from quantgate.tasks.det_resize import PageTooLarge  # noqa: E402

THREADS = 2
PAGES = 2
# Smaller than PaddleOCR's 960 for speed: the demo pages (at most 960 px) are shrunk to fit 640.
CANVAS, LIMIT_SIDE_LEN = (640, 640), 640
REC_TRANSFORMS = TransformsConfig(rec_image_shape=(3, 48, 320), color="bgr", mean=(0.5,), std=(0.5,),
                                  line_padding="zero")
CLS_TRANSFORMS = TransformsConfig(resize_pad=(48, 192), color="bgr", mean=(0.5,), std=(0.5,), line_padding="zero")
ALL_FP32 = combo_name(uniform(True, FP32))
ALL_INT8 = combo_name(uniform(True, INT8))


def to_onnx(model_dir: Path, onnx_file: Path) -> Path:
    command = [str(Path(sys.executable).parent / "paddle2onnx"), "--model_dir", str(model_dir),
               "--model_filename", "inference.pdmodel", "--params_filename", "inference.pdiparams",
               "--save_file", str(onnx_file), "--opset_version", "13"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and onnx_file.is_file(), done.stdout[-2000:] + done.stderr[-2000:]
    return onnx_file


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """The three components, each with one FP32 ONNX file standing in for both of its forms."""
    models = paddleocr_models()
    folder = tmp_path_factory.mktemp("ppocr-onnx")
    files = {}
    for name, model_dir in (("det", models.det), ("cls", models.cls), ("rec", models.rec)):
        onnx_file = to_onnx(model_dir, folder / f"{name}.onnx")
        files[name] = ModelFiles(fp32_onnx=onnx_file, int8_onnx=onnx_file)
    detector = DetectorSpec(files["det"], canvas=CANVAS, limit_side_len=LIMIT_SIDE_LEN, limit_type="max",
                            mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), color="bgr")
    classifier = ClassifierSpec(files["cls"], CLS_TRANSFORMS)
    recognizer = RecognizerSpec(files["rec"], REC_TRANSFORMS, (*models.dictionary(), " "))
    return detector, classifier, recognizer


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Two rendered demo pages (RGB arrays) and their PaddleOCR labels."""
    root = tmp_path_factory.mktemp("pages")
    entries = render_pages(root, PAGES, seed=0)
    return ([np.asarray(Image.open(root / relative).convert("RGB")) for relative, _ in entries],
            [boxes for _, boxes in entries])


@pytest.fixture(scope="module")
def ort_reads(specs, pages):
    """Every system (all-FP32, all-INT8 and the six mixed ones) in onnxruntime."""
    return run_systems(pages[0], "onnxruntime", *specs, all_combos(has_classifier=True), THREADS)


@pytest.fixture(scope="module")
def ov_reads(specs, pages):
    """The all-FP32 and all-INT8 systems in OpenVINO."""
    return run_systems(pages[0], "openvino", *specs, all_combos(has_classifier=True)[:2], THREADS)


def texts(reads) -> list[list[str]]:
    return [[line.text for line in page.lines] for page in reads]


def test_the_fp32_system_reads_most_lines_of_clean_pages_exactly(ort_reads, pages):
    scores = system_scores(pages[1], [page.pairs() for page in ort_reads[ALL_FP32]])
    assert scores["gt_lines"] >= 10
    assert scores["e2e_line_accuracy_pct"] >= 80.0, scores
    assert scores["missed_lines"] <= 1 and scores["spurious_lines"] <= 1, scores


def test_identical_fp32_and_int8_files_read_alike_in_every_combination(ort_reads, pages):
    assert list(ort_reads) == [combo_name(combo) for combo in all_combos(True)]
    assert len(ort_reads) == 8
    metrics = system_metrics(pages[1], ort_reads)
    assert metrics["reference"] == ALL_FP32
    for name, system in metrics["systems"].items():
        assert texts(ort_reads[name]) == texts(ort_reads[ALL_FP32]), name
        if name != ALL_FP32:
            assert system["vs_fp32"]["line_agreement"] == 1.0, name
            assert system["vs_fp32"]["differing_lines"] == [] and system["vs_fp32"]["e2e_line_drop_pts"] == 0
    assert metrics[SPEEDUP] > 0
    assert metrics[SPEEDUP] == pytest.approx(metrics["systems"][ALL_FP32][LATENCY_P50] /
                                             metrics["systems"][ALL_INT8][LATENCY_P50])


def test_page_timings_are_positive_and_their_split_fits_in_the_total(ort_reads, ov_reads):
    for reads in (ort_reads, ov_reads):
        for name, pages_read in reads.items():
            for page in pages_read:
                parts = (page.detection_ms, page.crops_ms, page.recognition_ms)
                assert min(parts) > 0 and sum(parts) <= page.total_ms, (name, page)
                assert page.boxes >= len(page.lines) and 0 <= page.squeezed <= page.boxes


def test_onnxruntime_and_openvino_read_the_same_lines(ort_reads, ov_reads, pages):
    assert texts(ov_reads[ALL_FP32]) == texts(ort_reads[ALL_FP32])
    compared = compare_systems(pages[1], [page.pairs() for page in ort_reads[ALL_FP32]],
                               [page.pairs() for page in ov_reads[ALL_FP32]])
    assert compared["line_agreement"] == 1.0
    for ort_page, ov_page in zip(ort_reads[ALL_FP32], ov_reads[ALL_FP32]):
        for ort_line, ov_line in zip(ort_page.lines, ov_page.lines):
            assert np.abs(ort_line.points - ov_line.points).max() <= 1  # float rounding may move a corner a pixel


def test_an_upside_down_page_is_read_through_the_direction_classifier(specs, pages, ort_reads):
    system = SystemRunner("onnxruntime", *specs, uniform(True, FP32), THREADS)
    page, labels = pages[0][0], pages[1][0]
    height, width = page.shape[:2]
    turned = [{"transcription": line["transcription"],
               "points": [[width - 1 - x, height - 1 - y] for x, y in line["points"]]} for line in labels]
    read = system.read(np.ascontiguousarray(page[::-1, ::-1]))
    assert read.flipped >= len(read.lines) - 1 > 0
    upright = system_scores([labels], [ort_reads[ALL_FP32][0].pairs()])["exact_lines"]
    assert system_scores([turned], [read.pairs()])["exact_lines"] >= upright - 1


def test_drop_score_leaves_out_lines_the_recognizer_is_unsure_of(specs, pages, ort_reads):
    lenient = ort_reads[ALL_FP32][0]
    assert all(line.score >= 0.5 for page in ort_reads[ALL_FP32] for line in page.lines)  # PaddleOCR's default
    threshold = float(np.median([line.score for line in lenient.lines]))
    strict = SystemRunner("onnxruntime", *specs, uniform(True, FP32), THREADS, drop_score=threshold)
    read = strict.read(pages[0][0])
    kept = [line.text for line in lenient.lines if line.score >= threshold]
    assert [line.text for line in read.lines] == kept and 0 < len(kept) < len(lenient.lines)
    assert read.dropped == lenient.dropped + len(lenient.lines) - len(kept)


def test_systems_sharing_a_precision_share_its_runner(specs):
    models = SystemModels("onnxruntime", *specs, THREADS)
    first = SystemRunner("onnxruntime", *specs, {"detector": "fp32", "classifier": "fp32", "recognizer": "int8"},
                         THREADS, models=models)
    second = SystemRunner("onnxruntime", *specs, {"detector": "fp32", "classifier": "int8", "recognizer": "int8"},
                          THREADS, models=models)
    assert first.detect is second.detect and first.recognize is second.recognize
    assert first.classify is not second.classify
    assert len(models.opened) == 4


def test_line_confidence_is_the_mean_best_probability_of_the_decoded_steps():
    # steps: blank, "a" 0.9, "a" 0.6 (a repeat: not counted), blank, "b" 0.7
    probabilities = np.asarray([[0.8, 0.1, 0.1], [0.05, 0.9, 0.05], [0.3, 0.6, 0.1], [0.9, 0.05, 0.05],
                                [0.2, 0.1, 0.7]])
    assert line_confidence(probabilities) == pytest.approx((0.9 + 0.7) / 2)
    assert line_confidence(np.asarray([[0.9, 0.1], [0.8, 0.2]])) == 0.0  # nothing read


def test_every_mix_of_precisions_is_a_system_with_fp32_and_int8_first():
    with_classifier, without = all_combos(True), all_combos(False)
    assert len(with_classifier) == 8 and len(without) == 4
    assert [combo_name(c) for c in without] == ["det:fp32+rec:fp32", "det:int8+rec:int8", "det:fp32+rec:int8",
                                                "det:int8+rec:fp32"]
    assert combo_name(with_classifier[1]) == "det:int8+cls:int8+rec:int8"
    assert len({combo_name(c) for c in with_classifier}) == 8


def test_bad_systems_and_pages_are_refused_before_any_model_opens(specs, pages):
    with pytest.raises(ValueError) as refused:
        run_systems(pages[0], "onnxruntime", *specs, [{"detector": "int4", "recognizer": "fp32"}], THREADS)
    message = str(refused.value)
    assert "int4" in message and "classifier has no precision" in message
    unshrunk = dataclasses.replace(specs[0], limit_side_len=960)  # pages up to 960 px stay larger than 640
    with pytest.raises(PageTooLarge, match="page 1"):
        run_systems([np.zeros((320, 320, 3), np.uint8), np.zeros((900, 700, 3), np.uint8)], "onnxruntime",
                    unshrunk, None, specs[2], all_combos(False), THREADS)
