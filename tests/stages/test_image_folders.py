import csv

import numpy as np
import pytest
from folder_images import write_image_folder
from PIL import Image

from quantgate.config import DataConfig
from quantgate.stages.data.errors import DataError
from quantgate.stages.data.splits import load_splits, prepare_data

TRANSFORMS = {"resize": 20, "center_crop": 16, "mean": [0.5], "std": [0.5]}


def folder_config(path, **extra) -> DataConfig:
    return DataConfig(dataset="image_folder", path=str(path), transforms=TRANSFORMS,
                      test_fraction=0.25, calibration_fraction=0.25, validation_fraction=0.125, **extra)


def run(config, out):
    out.mkdir(exist_ok=True)
    return prepare_data(config, out)


def test_a_folder_is_decoded_transformed_split_and_described(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    result = run(folder_config(images), tmp_path / "a")
    splits = load_splits(tmp_path / "a" / "splits.npz")
    assert splits.input_shape == (3, 16, 16) and splits.x_train.dtype == np.float32
    assert result.metrics["num_classes"] == 3 and result.metrics["source"]["classes"] == ["class_0", "class_1", "class_2"]
    assert sum(result.metrics[f"samples_{name}"] for name in ("train", "calibration", "validation", "test")) == 24
    for labels in (splits.y_train, splits.y_calibration, splits.y_test):
        assert set(labels.tolist()) == {0, 1, 2}
    # class_0 is red: after (x - 0.5) / 0.5 its red channel is near +1, blue near -1 (grayscale files excepted).
    red = splits.x_train[splits.y_train == 0]
    assert np.median(red[:, 0]) > 0.5 and np.median(red[:, 2]) < -0.5
    preprocessing = result.metrics["preprocessing"]
    assert preprocessing["input_shape"] == [3, 16, 16] and preprocessing["transforms"]["center_crop"] == 16
    assert any("normalize" in step for step in preprocessing["steps"])

    with open(tmp_path / "a" / "files.csv") as handle:  # which file went where, row by row of splits.npz
        rows = list(csv.DictReader(handle))
    test_rows = [row for row in rows if row["split"] == "test"]
    assert len(rows) == 24 and [int(row["label"]) for row in test_rows] == splits.y_test.tolist()
    assert all(row["file"].startswith(str(images.resolve())) and row["class"] in row["file"] for row in rows)

    again = run(folder_config(images), tmp_path / "b")  # same files, same seed: same split and fingerprint
    assert again.metrics["fingerprint_sha256"] == result.metrics["fingerprint_sha256"]
    assert (tmp_path / "a" / "splits.npz").read_bytes() == (tmp_path / "b" / "splits.npz").read_bytes()


def test_grayscale_transform_gives_one_channel(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=2, per_class=8)
    config = DataConfig(dataset="image_folder", path=str(images), test_fraction=0.25, calibration_fraction=0.25,
                        validation_fraction=0.125, transforms={"resize": [12, 10], "color": "grayscale"})
    run(config, tmp_path / "out")
    splits = load_splits(tmp_path / "out" / "splits.npz")
    assert splits.input_shape == (1, 12, 10) and 0.0 <= splits.x_test.min() and splits.x_test.max() <= 1.0


def test_changing_one_image_changes_the_fingerprint(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    before = run(folder_config(images), tmp_path / "a").metrics["fingerprint_sha256"]
    target = images / "class_1" / "img_0.png"
    pixels = np.asarray(Image.open(target)).copy()
    pixels[0, 0] = 255 - pixels[0, 0]  # one pixel
    Image.fromarray(pixels).save(target)
    changed = run(folder_config(images), tmp_path / "b").metrics["fingerprint_sha256"]
    assert changed != before
    moved = images.rename(tmp_path / "moved")  # the same files in another place: the same dataset
    assert run(folder_config(moved), tmp_path / "c").metrics["fingerprint_sha256"] == changed


def test_separate_train_and_test_folders(tmp_path):
    train = write_image_folder(tmp_path / "train", classes=3, per_class=8)
    test = write_image_folder(tmp_path / "test", classes=3, per_class=2, seed=1)
    result = run(folder_config(train, test_path=str(test)), tmp_path / "out")
    assert result.metrics["samples_test"] == 6 and result.metrics["samples_validation"] == 3
    assert result.metrics["samples_train"] + result.metrics["samples_calibration"] + result.metrics["samples_validation"] == 24
    assert result.metrics["source"]["test_files"] == 6

    (test / "class_2").rename(test / "other")
    with pytest.raises(DataError, match="test folder's classes .* differ"):
        run(folder_config(train, test_path=str(test)), tmp_path / "out2")


def test_unusable_folders_are_named_before_training(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no class folders here")
    with pytest.raises(DataError, match="has no class sub-folders"):
        run(folder_config(empty), tmp_path / "o1")

    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    (images / "class_3").mkdir()
    (images / "class_3" / "readme.txt").write_text("not an image")
    with pytest.raises(DataError, match="class 'class_3' .* has no images"):
        run(folder_config(images), tmp_path / "o2")
    (images / "class_3" / "readme.txt").unlink()
    (images / "class_3").rmdir()

    broken = images / "class_1" / "img_1.jpg"
    broken.write_bytes(broken.read_bytes()[:200])  # truncated JPEG
    with pytest.raises(DataError, match=r"cannot read image .*class_1/img_1\.jpg"):
        run(folder_config(images), tmp_path / "o3")


def test_too_few_test_images_and_mixed_sizes_are_clear_errors(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=3)
    with pytest.raises(DataError, match="the test split would hold 1 images but there are 3 classes.*data.test_fraction"):
        run(DataConfig(dataset="image_folder", path=str(images), transforms=TRANSFORMS, test_fraction=0.1), tmp_path / "o1")

    with pytest.raises(DataError, match="different sizes after pre-processing.*data.transforms.resize"):
        run(DataConfig(dataset="image_folder", path=str(images), test_fraction=0.4, calibration_fraction=0.3),
            tmp_path / "o2")
