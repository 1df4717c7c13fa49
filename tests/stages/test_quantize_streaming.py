"""PaddleSlim calibration streamed from an image folder: files decoded by worker processes, batch by batch."""

import os
from pathlib import Path

import numpy as np
import paddle
import pytest
from PIL import Image

from quantgate.config import QuantizeConfig, validate_config
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.static_graph import load_program, op_counts, static_mode
from quantgate.models.models import build_model
from quantgate.runtimes.latency import session
from quantgate.stages.data import DataChanged, open_data, prepare_data
from quantgate.stages.quantize.layer_sensitivity import lowered_model
from quantgate.stages.quantize.ptq import quantize
from quantgate.stages.quantize.validation_check import ValidationCheck

# Two batches of eight out of the calibration split's 18 images (3 classes x 40, 15 % held out):
# the limit, not the split's end, stops the stream.
CALIBRATION = QuantizeConfig(strategy="single", batch_size=8, batch_nums=2)


def image_folder_and_cnn(root: Path, per_class: int = 40) -> Path:
    """Under `root`: a 3-class folder of 16x16 RGB PNGs (`per_class` each), its data stage output, and an FP32
    digits CNN exported for it; returns `root`."""
    rng = np.random.RandomState(0)
    for label in range(3):
        (root / "images" / f"class_{label}").mkdir(parents=True)
        for index in range(per_class):
            pixels = np.clip(rng.randint(0, 90, (16, 16, 3)) + 80 * label, 0, 255).astype(np.uint8)
            Image.fromarray(pixels, "RGB").save(root / "images" / f"class_{label}" / f"{index}.png")
    config = validate_config({"data": {"dataset": "image_folder", "path": str(root / "images"), "num_workers": 0}})
    (root / "data").mkdir()
    prepare_data(config.data, root / "data")
    data = open_data(root / "data")
    paddle.seed(0)
    model = build_model("digits_cnn", data.num_classes, data.input_shape)  # untrained: PTQ needs no accuracy
    model.eval()
    spec = paddle.static.InputSpec([None, *data.input_shape], "float32", "image")
    paddle.jit.save(model, str(root / "export" / "model"), input_spec=[spec])
    return root


@pytest.fixture(scope="module")
def folder_data(tmp_path_factory):
    """A 3-class folder of 16x16 RGB PNGs, its data stage output, and an FP32 digits CNN exported for it."""
    return image_folder_and_cnn(tmp_path_factory.mktemp("streaming"))


def quantized(folder_data, name, num_workers):
    out = folder_data / name
    out.mkdir()
    result = quantize(CALIBRATION, folder_data / "export", "model.pdmodel", "model.pdiparams", folder_data / "data",
                      out, num_workers=num_workers)
    return result, out


@pytest.fixture(scope="module")
def streamed(folder_data):
    return quantized(folder_data, "workers", num_workers=2)


def test_calibration_streams_the_image_folder_through_worker_processes(folder_data, streamed):
    data = open_data(folder_data / "data")
    assert data.on_disk and data.input_shape == (3, 16, 16) and data.size("calibration") == 18
    result, out = streamed
    assert result.metrics["calibration_batches"] == 2
    assert result.metrics["calibration_samples"] == 16  # what was fed, not what the split holds
    assert result.metrics["quantize_linear_ops"] > 0
    with static_mode():
        assert op_counts(load_program(out / "model").program).get("quantize_linear", 0) > 0
    # Decoding in worker processes feeds PaddleSlim the same batches as decoding in this one.
    _, inline = quantized(folder_data, "inline", num_workers=0)
    assert (out / "model.pdiparams").read_bytes() == (inline / "model.pdiparams").read_bytes()


def test_the_streamed_validation_check_scores_as_the_whole_split_in_memory_would(folder_data, streamed, tmp_path):
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    to_onnx(folder_data / "export" / "model.pdmodel", folder_data / "export" / "model.pdiparams", fp32)
    lowered_model(streamed[1], int8)
    data = open_data(folder_data / "data")
    check = ValidationCheck(fp32, data, threads=1, batch_size=5, num_workers=2)  # 12 images: 5 + 5 + 2
    images, labels = data.array("validation")
    expected_fp32, expected_int8 = (session(path, 1).run(None, {"image": images})[0] for path in (fp32, int8))
    score = check.score(int8)
    assert score["validation_samples"] == len(labels) == 12
    assert score["fp32_top1_pct"] == pytest.approx(100 * np.mean(expected_fp32.argmax(1) == labels))
    assert score["int8_top1_pct"] == pytest.approx(100 * np.mean(expected_int8.argmax(1) == labels))
    assert score["agreement"] == pytest.approx(np.mean(expected_int8.argmax(1) == expected_fp32.argmax(1)))
    relative = np.mean((expected_int8 - expected_fp32) ** 2) / np.var(expected_fp32)
    assert score["logit_error"] == pytest.approx(relative, rel=1e-4) and relative > 0
    assert check.score(fp32)["logit_error"] == 0.0 and check.score(fp32)["agreement"] == 1.0


def test_an_image_changed_after_the_data_stage_stops_calibration_by_name(folder_data, tmp_path):
    changed = Path(open_data(folder_data / "data").files("calibration")[0])
    original, stat = changed.read_bytes(), changed.stat()
    try:
        Image.new("RGB", (16, 16), (255, 255, 255)).save(changed)
        with pytest.raises(DataChanged, match=changed.name):
            quantize(CALIBRATION, folder_data / "export", "model.pdmodel", "model.pdiparams", folder_data / "data",
                     tmp_path, num_workers=2)
    finally:  # the file as the data stage recorded it, for the other tests of this module
        changed.write_bytes(original)
        os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_capped_calibration_spreads_over_every_class(folder_data):
    from quantgate.stages.data import open_data
    from quantgate.stages.quantize.ptq import calibration_batches, calibration_rows

    labels = open_data(folder_data / "data").labels("calibration")  # stored class by class
    rows = calibration_rows(len(labels), 6)
    assert len(rows) == 6 and set(labels[rows].tolist()) == set(labels.tolist())  # not the first class only
    assert calibration_rows(len(labels), 10_000).tolist() == list(range(len(labels)))
    capped = QuantizeConfig(batch_size=4, max_calibration_samples=6)
    assert calibration_batches(len(labels), capped) == 2  # ceil(6 / 4): the cap, not the split, decides
    assert calibration_batches(len(labels), capped.model_copy(update={"max_calibration_samples": None})) == \
        -(-len(labels) // 4)
