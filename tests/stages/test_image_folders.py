import os
import threading

import numpy as np
import pytest
from folder_images import write_image_folder
from PIL import Image

from quantgate.config import DataConfig
from quantgate.samples import reading
from quantgate.samples.errors import DataError
from quantgate.samples.file_table import read_table
from quantgate.stages.data import DataChanged, HashState, open_data, plan_image_folders, prepare_data

TRANSFORMS = {"resize": 20, "center_crop": 16, "mean": [0.5], "std": [0.5]}
SPLITS = ("train", "calibration", "validation", "test")


def folder_config(path, **extra) -> DataConfig:
    return DataConfig(dataset="image_folder", path=str(path), transforms=TRANSFORMS,
                      test_fraction=0.25, calibration_fraction=0.25, validation_fraction=0.125, **extra)


def run(config, out, plan=None):
    out.mkdir(exist_ok=True)
    return prepare_data(config, out, plan)


def test_a_folder_is_recorded_as_a_file_table_and_read_transformed(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    result = run(folder_config(images), tmp_path / "a")
    assert not (tmp_path / "a" / "splits.npz").exists()  # files, never pixels
    data = open_data(tmp_path / "a")
    assert data.on_disk and data.input_shape == (3, 16, 16)
    assert result.metrics["num_classes"] == 3 and result.metrics["source"]["classes"] == ["class_0", "class_1", "class_2"]
    assert sum(result.metrics[f"samples_{name}"] for name in SPLITS) == 24 == result.metrics["source"]["files"]
    for name in ("train", "calibration", "test"):
        assert set(data.labels(name).tolist()) == {0, 1, 2}
    x_train, y_train = data.array("train")
    assert x_train.dtype == np.float32 and x_train.shape[1:] == (3, 16, 16)
    # class_0 is red: after (x - 0.5) / 0.5 its red channel is near +1, blue near -1 (grayscale files excepted).
    red = x_train[y_train == 0]
    assert np.median(red[:, 0]) > 0.5 and np.median(red[:, 2]) < -0.5
    preprocessing = result.metrics["preprocessing"]
    assert preprocessing["input_shape"] == [3, 16, 16] and preprocessing["transforms"]["center_crop"] == 16

    rows = read_table(tmp_path / "a" / "files.csv.gz")  # which file went where, with its size, mtime and sha256
    assert len(rows) == 24 and [row.label for row in rows if row.split == "test"] == data.labels("test").tolist()
    assert all(row.label_name in row.file and len(row.sha256) == 64 for row in rows)
    assert data.files("test")[0].startswith(str(images.resolve()))

    again = run(folder_config(images), tmp_path / "b")  # same files, same seed: same split, fingerprint, table
    assert again.metrics["fingerprint_sha256"] == result.metrics["fingerprint_sha256"]
    assert (tmp_path / "a" / "files.csv.gz").read_bytes() == (tmp_path / "b" / "files.csv.gz").read_bytes()


def test_grayscale_transform_gives_one_channel(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=2, per_class=8)
    config = DataConfig(dataset="image_folder", path=str(images), test_fraction=0.25, calibration_fraction=0.25,
                        validation_fraction=0.125, transforms={"resize": [12, 10], "color": "grayscale"})
    run(config, tmp_path / "out")
    x_test, _ = open_data(tmp_path / "out").array("test")
    assert x_test.shape[1:] == (1, 12, 10) and 0.0 <= x_test.min() and x_test.max() <= 1.0


def test_changing_one_image_changes_the_fingerprint_moving_the_folder_does_not(tmp_path):
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


def test_the_hash_state_rehashes_only_changed_files(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    state = HashState(tmp_path / "state.sqlite")
    first = plan_image_folders(folder_config(images), state)
    assert plan_image_folders(folder_config(images), state).table_sha256 == first.table_sha256
    # A remembered hash is used only for the very same (path, size, mtime_ns, inode): forge one in the state
    # for a file, then touch the file: the forged value must not survive.
    import sqlite3
    target = str((images / "class_0" / "img_0.png").resolve())
    with sqlite3.connect(state.database) as db:
        db.execute("UPDATE file_state SET sha256 = ? WHERE path = ?", ("0" * 64, target))
    forged = plan_image_folders(folder_config(images), state)
    assert any(row.sha256 == "0" * 64 for row in forged.rows)  # trusted while the file is untouched
    os.utime(target, ns=(1_000_000_000, 1_000_000_000))
    rescanned = plan_image_folders(folder_config(images), state)
    assert not any(row.sha256 == "0" * 64 for row in rescanned.rows)
    assert rescanned.table_sha256 != first.table_sha256  # the table records the new mtime...
    assert rescanned.content_sha256 == first.content_sha256  # ...but the bytes are the same: the data stage is reused


def test_a_file_changed_after_the_data_stage_is_named_when_read(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    run(folder_config(images), tmp_path / "a")
    data = open_data(tmp_path / "a")
    victim = data.files("test")[1]
    with open(victim, "ab") as handle:
        handle.write(b"\0")  # other bytes (and size) than the table records
    for workers in (0, 2):
        with pytest.raises(DataChanged, match=f"image {victim} changed after the data stage recorded it"):
            list(data.batches("test", 4, num_workers=workers))


def test_corrupt_images_are_named_or_skipped_and_listed(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    broken = images / "class_1" / "img_1.jpg"
    broken.write_bytes(broken.read_bytes()[:200])  # truncated JPEG
    (images / "class_2" / "img_2.bmp").write_bytes(b"not an image at all")
    with pytest.raises(DataError, match=r"2 image\(s\) under data.path cannot be decoded: .*class_1/img_1\.jpg"
                       r".*on_bad_image: skip"):
        run(folder_config(images), tmp_path / "o1")
    assert not (tmp_path / "o1" / "files.csv.gz").exists()

    result = run(folder_config(images, on_bad_image="skip"), tmp_path / "o2")
    skipped = sorted(item["file"] for item in result.metrics["skipped_images"])
    assert skipped == [str((images / "class_1" / "img_1.jpg").resolve()), str((images / "class_2" / "img_2.bmp").resolve())]
    assert result.metrics["source"]["files"] == 22
    assert all(x.shape[1:] == (3, 16, 16) for x, _ in open_data(tmp_path / "o2").batches("train", 8))


def test_separate_train_and_test_folders(tmp_path):
    train = write_image_folder(tmp_path / "train", classes=3, per_class=8)
    test = write_image_folder(tmp_path / "test", classes=3, per_class=2, seed=1)
    result = run(folder_config(train, test_path=str(test)), tmp_path / "out")
    assert result.metrics["samples_test"] == 6 and result.metrics["samples_validation"] == 3
    assert result.metrics["samples_train"] + result.metrics["samples_calibration"] + result.metrics["samples_validation"] == 24
    assert open_data(tmp_path / "out").files("test")[0].startswith(str(test.resolve()))

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


def test_too_few_test_images_and_mixed_sizes_are_clear_errors(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=3)
    with pytest.raises(DataError, match="the test split would hold 1 images but there are 3 classes.*data.test_fraction"):
        run(DataConfig(dataset="image_folder", path=str(images), transforms=TRANSFORMS, test_fraction=0.1), tmp_path / "o1")

    with pytest.raises(DataError, match="different sizes after pre-processing.*data.transforms.resize"):
        run(DataConfig(dataset="image_folder", path=str(images), test_fraction=0.4, calibration_fraction=0.3),
            tmp_path / "o2")


def _batches_in_a_thread(data, workers: int, timeout_s: float = 60.0):
    """Read the test split in a daemon thread: (finished, the exception it raised)."""
    outcome: dict = {}

    def read():
        try:
            list(data.batches("test", 4, workers))
        except Exception as exc:  # noqa: BLE001  (the test inspects it)
            outcome["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return not reader.is_alive(), outcome.get("error")


@pytest.mark.parametrize("workers", [0, 2])
def test_an_image_that_fails_while_being_prepared_is_named_instead_of_hanging_the_loader(tmp_path, monkeypatch,
                                                                                         workers):
    # Raised inside paddle.io.DataLoader, an exception used to be lost: with workers the loader raised
    # "Blocking queue is killed" without its message, and with none its reader thread died and the loop
    # waited forever. Now the item's status is returned and the error is replayed with the file named.
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    run(folder_config(images), tmp_path / "a")
    data = open_data(tmp_path / "a")
    victim = data.files("test")[1]
    original = reading.FileSplit.prepare

    def prepare(self, index):
        if index == 1:
            raise ValueError("unsupported colour profile")  # e.g. a transform that cannot handle this image
        return original(self, index)

    monkeypatch.setattr(reading.FileSplit, "prepare", prepare)
    if workers:  # in the main thread: a thread of its own cannot fork DataLoader workers with Paddle's handlers
        with pytest.raises(Exception) as raised:
            list(data.batches("test", 4, workers))
        finished, error = True, raised.value
    else:
        finished, error = _batches_in_a_thread(data, workers)
    assert finished, "reading the split hung"
    assert isinstance(error, DataError) and victim in str(error)
    assert "ValueError: unsupported colour profile" in str(error)
