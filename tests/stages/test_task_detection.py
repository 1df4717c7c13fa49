"""The text_detection task: maps and geometry to JSON predictions, scored against PaddleOCR labels, FP32 against
INT8; and PaddleOCR's real PP-OCRv4 detector finding the lines of a rendered page through page_input and predict.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import cjk_font, paddleocr_models  # noqa: E402

from quantgate.tasks.det_resize import page_input  # noqa: E402
from quantgate.tasks.detection import TextDetection, boxes, ground_truth  # noqa: E402

TASK = TextDetection()
GEOMETRY = [500, 700, 224, 320]  # a 500x700 page resized to 224x320, on a 320x320 canvas
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # PaddleOCR's NormalizeImage for the detectors


def label(*rects: tuple[int, int, int, int], ignored: int | None = None) -> str:
    return json.dumps([{"transcription": "###" if index == ignored else f"第{index}行",
                        "points": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]}
                       for index, (x0, y0, x1, y1) in enumerate(rects)], ensure_ascii=False)


def prediction(*rects: tuple[int, int, int, int]) -> str:
    return json.dumps([{"points": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]], "score": 0.9}
                       for x0, y0, x1, y1 in rects])


def maps_with_kernels(*kernels: list[tuple[int, int, int, int]]) -> np.ndarray:
    """[N, 1, 320, 320] maps, page n holding text kernels at the given map pixels (x0, y0, x1, y1 inclusive)."""
    maps = np.zeros((len(kernels), 1, 320, 320), np.float32)
    for page, rects in enumerate(kernels):
        for x0, y0, x1, y1 in rects:
            maps[page, 0, y0:y1 + 1, x0:x1 + 1] = 0.87654
    return maps


def test_predictions_are_json_strings_that_save_without_pickle(tmp_path):
    maps = maps_with_kernels([(30, 40, 130, 60), (30, 100, 200, 120)], [])
    predicted = TASK.predict(maps, np.asarray([GEOMETRY, GEOMETRY], np.int64))
    assert predicted.dtype.kind == "U" and predicted.shape == (2,)
    np.savez(tmp_path / "p.npz", predicted=predicted)
    loaded = np.load(tmp_path / "p.npz", allow_pickle=False)["predicted"]
    np.testing.assert_array_equal(loaded, predicted)
    first, second = json.loads(loaded[0]), json.loads(loaded[1])
    assert len(first) == 2 and second == []
    assert all(isinstance(v, int) for item in first for point in item["points"] for v in point)
    assert {item["score"] for item in first} == {0.8765}  # rounded to 4 decimals
    assert [box.shape for box in boxes(loaded[0])] == [(4, 2), (4, 2)]


def test_predict_needs_the_pages_geometry():
    maps = maps_with_kernels([(30, 40, 130, 60)])
    with pytest.raises(ValueError, match="geometry"):
        TASK.predict(maps)
    with pytest.raises(ValueError, match=r"\(1, 4\)"):
        TASK.predict(maps, np.asarray([GEOMETRY, GEOMETRY]))
    with pytest.raises(ValueError, match=r"\[N, 1, H, W\]"):
        TASK.predict(maps[:, 0], np.asarray([GEOMETRY]))
    assert TASK.predict(np.zeros((0, 1, 320, 320), np.float32), np.zeros((0, 4), np.int64)).dtype.kind == "U"


def test_predicted_boxes_score_100_against_the_kernels_page_regions():
    maps = maps_with_kernels([(30, 40, 130, 60)])
    predicted = TASK.predict(maps, np.asarray([GEOMETRY]))
    # the kernel grown by 12.5 map pixels, in page pixels (x * 700/320, y * 500/224)
    reference = np.asarray([label((38, 61, 312, 162))])
    scores = TASK.scores(reference, predicted)
    assert scores == {"top1_pct": 100.0, "precision_pct": 100.0, "recall_pct": 100.0, "hmean_pct": 100.0}


def test_scores_use_paddleocr_labels_with_ignored_regions():
    references = np.asarray([label((0, 0, 100, 20), (0, 50, 100, 70), (200, 0, 300, 40), ignored=2),
                             label((0, 0, 100, 20))])
    predicted = np.asarray([prediction((0, 0, 100, 20), (210, 5, 290, 35)), prediction((300, 300, 350, 320))])
    scores = TASK.scores(references, predicted)
    # 3 regions count, 2 detections count (the one inside ### does not), 1 match
    assert scores["precision_pct"] == pytest.approx(50.0) and scores["recall_pct"] == pytest.approx(100 / 3)
    assert scores["top1_pct"] == scores["hmean_pct"] == pytest.approx(40.0)
    assert all(np.isnan(v) for v in TASK.scores(np.zeros(0, str), np.zeros(0, str)).values())


def test_compare_reports_both_models_and_how_int8_boxes_agree_with_fp32():
    references = np.asarray([label((0, 0, 100, 20), (0, 50, 100, 70)), label((0, 0, 100, 20))])
    fp32 = np.asarray([prediction((0, 0, 100, 20), (0, 50, 100, 70)), prediction((0, 0, 100, 20))])
    int8 = np.asarray([prediction((0, 0, 100, 20)), prediction((1, 0, 100, 21), (400, 400, 420, 420))])
    compared = TASK.compare(references, fp32, int8)
    # INT8: 2 of 3 regions, 2 of 3 boxes right -> P = R = hmean = 66.7; against FP32's boxes the same
    assert compared["fp32_hmean_pct"] == compared["fp32_top1_pct"] == pytest.approx(100.0)
    assert compared["int8_hmean_pct"] == compared["int8_top1_pct"] == pytest.approx(200 / 3)
    assert compared["int8_precision_pct"] == pytest.approx(200 / 3)
    assert compared["int8_recall_pct"] == pytest.approx(200 / 3)
    assert compared["accuracy_delta_pts"] == pytest.approx(-100 / 3)
    assert compared["hmean_drop_pts"] == pytest.approx(100 / 3)
    assert compared["agreement"] == pytest.approx(2 / 3)
    assert (compared["fp32_boxes"], compared["int8_boxes"]) == (3, 3)
    assert set(compared) == {"fp32_top1_pct", "int8_top1_pct", "accuracy_delta_pts", "agreement",
                             "fp32_precision_pct", "int8_precision_pct", "fp32_recall_pct", "int8_recall_pct",
                             "fp32_hmean_pct", "int8_hmean_pct", "hmean_drop_pts", "fp32_boxes", "int8_boxes"}


def test_per_sample_is_each_pages_hmean_and_maps_are_not_kept():
    references = np.asarray([label((0, 0, 100, 20), (0, 50, 100, 70)), label(), label()])
    predicted = np.asarray([prediction((0, 0, 100, 20)), prediction(), prediction((0, 0, 10, 10))])
    np.testing.assert_allclose(TASK.per_sample(references, predicted), [2 / 3, 1.0, 0.0])
    assert TASK.per_sample(references, predicted).dtype == np.float64
    assert TASK.keeps_outputs is False
    with pytest.raises(ValueError):
        TASK.per_sample(references, predicted[:2])


def test_ground_truth_reads_paddleocr_labels_and_refuses_others():
    regions = ground_truth(label((0, 0, 10, 10), (5, 5, 20, 20), ignored=1))
    assert [r["transcription"] for r in regions] == ["第0行", "###"]
    assert regions[0]["points"].shape == (4, 2) and regions[0]["ignore"] is False
    with pytest.raises(ValueError, match="transcription"):
        ground_truth(json.dumps({"points": [[0, 0]]}))


# ---- PaddleOCR's PP-OCRv4 detector on a rendered page --------------------------------------------------------

LINES = (((40, 40), "北京华夏科技有限公司"), ((60, 170), "金额￥12,345.00元"), ((100, 300), "2024年3月15日"))


def rendered_page() -> tuple[np.ndarray, str]:
    """A white 600x400 page with three black lines of 32 px Chinese text, and its PaddleOCR label (the lines'
    ink boxes)."""
    from PIL import Image, ImageDraw

    from quantgate.pictures.fonts import pil_face

    font = pil_face(cjk_font(), 32)
    page = Image.new("RGB", (600, 400), (255, 255, 255))
    draw = ImageDraw.Draw(page)
    regions = []
    for (x, y), text in LINES:
        draw.text((x, y), text, fill=(0, 0, 0), font=font)
        left, top, right, bottom = draw.textbbox((x, y), text, font=font)
        regions.append({"transcription": text, "points": [[left, top], [right, top], [right, bottom],
                                                          [left, bottom]]})
    return np.asarray(page), json.dumps(regions, ensure_ascii=False)


def test_pp_ocrv4_detector_finds_every_line_of_a_rendered_page():
    from paddle import inference  # quantgate, imported above, has set FLAGS_enable_pir_api=0 for legacy programs

    det = paddleocr_models().det
    config = inference.Config(str(det / "inference.pdmodel"), str(det / "inference.pdiparams"))
    config.disable_gpu()
    config.disable_mkldnn()  # oneDNN's conv2d_transpose breaks this detector
    config.set_cpu_math_library_num_threads(2)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)

    rgb, reference = rendered_page()
    array, geometry = page_input(rgb, (640, 640), 960, "max", MEAN, STD, "bgr")
    assert geometry.tolist() == [400, 600, 384, 608]
    predictor.get_input_handle(predictor.get_input_names()[0]).copy_from_cpu(array[None])
    predictor.run()
    maps = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    assert maps.shape == (1, 1, 640, 640)

    predicted = TASK.predict(maps, geometry[None])
    found = json.loads(predicted[0])
    assert len(found) == 3 and all(item["score"] > 0.8 for item in found)
    assert TASK.scores(np.asarray([reference]), predicted)["hmean_pct"] == 100.0
