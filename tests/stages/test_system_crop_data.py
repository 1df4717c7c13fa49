"""The recognizer's data cut from labelled pages as the OCR system cuts its lines (quantgate/ocr/crop_data.py,
`quantgate crops`): one line per labelled box, and through the text_recognition data stage each line is, array for
array, what the system's recognizer is fed for that box."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.ocr_samples import paddleocr_models

from quantgate.cli import main as quantgate
from quantgate.config import DataConfig, TransformsConfig
from quantgate.demo.pages import write_demo_dataset
from quantgate.ocr.crop_data import BadPageLabels, write_crop_dataset
from quantgate.ocr.crops import crop_line, reading_order, rec_width
from quantgate.samples.text_reading import line_pixels
from quantgate.stages.data import open_data, prepare_data

WIDTH = 640  # the system's recognizer width in benchmarks/ocr_system.py
TRANSFORMS = {"rec_image_shape": [3, 48, WIDTH], "color": "bgr", "mean": [0.5], "std": [0.5], "line_padding": "zero"}
SPLITS = ("train", "calibration", "validation", "test")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four rendered demo pages (two calibration, two test) and their crops written by `quantgate crops`."""
    root = tmp_path_factory.mktemp("crop-data")
    pages, crops = root / "pages", root / "crops"
    write_demo_dataset(pages, 4, seed=5, test_fraction=0.5)
    code = quantgate(["crops", str(pages), str(crops), "--label-file", "calibration.txt", "--label-file", "test.txt",
                      "--width", str(WIDTH)])
    assert code == 0
    return pages, crops


def system_inputs(pages: Path, label_file: str) -> dict[str, tuple[np.ndarray, str]]:
    """What the system's recognizer is fed for each labelled box, by page and place in the system's reading
    order: the page read as RGB, the box cut by crop_line, resized and padded by line_pixels (engine.py's path)."""
    fed = {}
    for line in (pages / label_file).read_text(encoding="utf-8").splitlines():
        file, _, label = line.partition("\t")
        boxes = [(np.asarray(box["points"], np.float32), box["transcription"]) for box in json.loads(label)]
        page = np.asarray(Image.open(pages / file).convert("RGB"))
        for place, index in enumerate(reading_order([points for points, _ in boxes])):
            crop = crop_line(page, boxes[index][0])
            pixels = line_pixels(Image.fromarray(crop), tuple(TRANSFORMS["rec_image_shape"]),
                                 TransformsConfig(**TRANSFORMS))
            fed[f"{file}#{place}"] = (pixels, boxes[index][1])
    return fed


def test_one_crop_line_per_labelled_box_in_reading_order(dataset):
    pages, crops = dataset
    for name in ("calibration.txt", "test.txt"):
        boxes = sum(len(json.loads(line.split("\t")[1])) for line in (pages / name).read_text().splitlines())
        written = (crops / name).read_text(encoding="utf-8").splitlines()
        assert len(written) == boxes > 0
        assert all((crops / line.split("\t")[0]).is_file() for line in written)


def test_each_line_read_by_the_data_stage_is_what_the_system_feeds_its_recognizer(dataset, tmp_path):
    pages, crops = dataset
    models = paddleocr_models()
    config = DataConfig(dataset="text_lines", path=str(crops), label_file=str(crops / "calibration.txt"),
                        test_label_file=str(crops / "test.txt"), character_dict=str(models.keys),
                        use_space_char=True, validation_fraction=0.2, transforms=TRANSFORMS, num_workers=0)
    (tmp_path / "data").mkdir()
    prepare_data(config, tmp_path / "data")
    data = open_data(tmp_path / "data")
    fed = {**system_inputs(pages, "calibration.txt"), **system_inputs(pages, "test.txt")}
    seen = 0
    for split in SPLITS:
        if not data.size(split):
            continue
        images = np.concatenate([batch[0] for batch in data.batches(split, 8)])
        for path, pixels, text in zip(data.files(split), images, data.references(split)):
            relative = Path(path).relative_to(crops)  # crops/pages/<page>/<place>.png
            key = f"{relative.parent.relative_to('crops')}.png#{int(relative.stem)}"
            expected, label = fed[key]
            assert text == label
            np.testing.assert_array_equal(pixels, expected)
            seen += 1
    assert seen == len(fed) > 0


def test_the_width_given_counts_the_crops_that_recognizer_squeezes(dataset, tmp_path):
    pages, _ = dataset
    summary = write_crop_dataset(pages, pages / "calibration.txt", tmp_path, (3, 48, 320))
    crops = [Image.open(tmp_path / line.split("\t")[0]) for line in summary.label_file.read_text().splitlines()]
    assert summary.squeezed == sum(rec_width(crop.height, crop.width, (3, 48, 320))[1] for crop in crops) > 0
    assert summary.crops == len(crops) and summary.pages == 2


def test_unreadable_regions_are_skipped_and_bad_boxes_refused_with_their_line(dataset, tmp_path):
    pages, crops = dataset
    first = (pages / "calibration.txt").read_text(encoding="utf-8").splitlines()[0]
    file, _, label = first.partition("\t")
    boxes = json.loads(label)
    (tmp_path / "ignored.txt").write_text(f"{file}\t{json.dumps([*boxes, {**boxes[0], 'transcription': '###'}])}\n")
    summary = write_crop_dataset(pages, tmp_path / "ignored.txt", tmp_path / "out")
    assert (summary.crops, summary.skipped) == (len(boxes), 1)

    five = [[0, 0], [9, 0], [9, 9], [4, 12], [0, 9]]
    (tmp_path / "bad.txt").write_text(f"{file}\t{json.dumps([{'transcription': 'x', 'points': five}])}\n")
    with pytest.raises(BadPageLabels, match=r"bad.txt:1 box 1: .*not 4 \[x, y\] corners"):
        write_crop_dataset(pages, tmp_path / "bad.txt", tmp_path / "out")
    # a crops folder is never written over: the command says so and exits 2
    assert quantgate(["crops", str(pages), str(crops), "--label-file", "calibration.txt"]) == 2
