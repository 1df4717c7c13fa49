"""A dataset copied to another folder (another worker's mount) is the same data; any other byte or name is not."""

import json
import os
import shutil

import pytest
from folder_images import write_image_folder
from PIL import Image
from text_lines import write_text_lines

from quantgate.config import DataConfig
from quantgate.stages.data import DataChanged, HashState, open_data, plan_image_folders, plan_text_lines, prepare_data
from quantgate.stages.data.locations import data_roots, without_locations
from quantgate.stages.data.text_boxes import plan_text_boxes

ELSEWHERE_NS = 1_500_000_000_000_000_000  # the copy's mtime: a copy on another machine has its own


def copied_elsewhere(source, target):
    """Same bytes and relative paths; other absolute paths, inodes and mtimes."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for file in target.rglob("*"):
        if file.is_file():
            os.utime(file, ns=(ELSEWHERE_NS, ELSEWHERE_NS))
    return target


def folder_config(path, **extra) -> DataConfig:
    return DataConfig(dataset="image_folder", path=str(path), transforms={"resize": 16, "center_crop": 16},
                      test_fraction=0.25, calibration_fraction=0.25, validation_fraction=0.125, **extra)


def test_an_image_folder_copied_elsewhere_has_the_same_content_digest_and_a_changed_byte_or_name_does_not(tmp_path):
    first = write_image_folder(tmp_path / "mnt" / "a" / "ds", classes=3, per_class=8)
    (first / "class_2" / "img_2.bmp").write_bytes(b"not an image")  # left out, and listed, in both copies
    state = HashState(tmp_path / "hashes.sqlite")  # one worker's state: the copy's paths and inodes are new to it
    before = plan_image_folders(folder_config(first, on_bad_image="skip"), state)
    second = copied_elsewhere(first, tmp_path / "home" / "w" / "ds")
    moved = plan_image_folders(folder_config(second, on_bad_image="skip"), state)
    assert moved.roots != before.roots and moved.table_sha256 != before.table_sha256  # the old reuse key differed
    assert moved.content_sha256 == before.content_sha256 and len(moved.skipped) == 1
    # ...and so does the data stage's config once its locations are left out
    assert without_locations(folder_config(second), folder_config(second).model_dump(mode="json")) == \
        without_locations(folder_config(first), folder_config(first).model_dump(mode="json"))

    victim = second / "class_1" / "img_0.png"
    victim.write_bytes(victim.read_bytes() + b"\0")  # one byte more: still a PNG
    changed = plan_image_folders(folder_config(second, on_bad_image="skip"), state)
    assert changed.content_sha256 != before.content_sha256
    victim.rename(second / "class_1" / "img_0_renamed.png")
    renamed = plan_image_folders(folder_config(second, on_bad_image="skip"), state)
    assert renamed.content_sha256 not in (before.content_sha256, changed.content_sha256)


def test_whether_a_location_is_set_stays_in_the_digest_where_it_lies_does_not(tmp_path):
    train, test = write_image_folder(tmp_path / "train"), write_image_folder(tmp_path / "test", seed=1)
    alone, split = folder_config(train), folder_config(train, test_path=str(test))
    one, two = (without_locations(config, config.model_dump(mode="json")) for config in (alone, split))
    assert one["path"] is True and one["test_path"] is False and two["test_path"] is True
    assert str(tmp_path) not in json.dumps(two)
    assert data_roots(split) == {"path": str(train.resolve()), "test_path": str(test.resolve())}
    # A worker's process counts are its own: another worker scanning with more processes reuses the stage.
    busy = folder_config(train, test_path=str(test), num_workers=2, scan_workers=3)
    assert without_locations(busy, busy.model_dump(mode="json")) == two and "num_workers" not in two
    digits = DataConfig(dataset="digit_strings", character_dict=str(tmp_path / "dict.txt"))
    # the built-in digit strings read their dictionary in the stage: its path stays in the digest
    assert without_locations(digits, digits.model_dump(mode="json")) == digits.model_dump(mode="json")


def test_text_lines_copied_elsewhere_with_their_label_file_are_the_same_content(tmp_path):
    lines = write_text_lines(tmp_path / "mnt" / "lines", lines=20)
    before = plan_text_lines(DataConfig(**lines.data_config()))
    copy = copied_elsewhere(lines.root, tmp_path / "home" / "lines")
    config = DataConfig(**{**lines.data_config(), "path": str(copy), "label_file": str(copy / lines.label_file.name)})
    moved = plan_text_lines(config)
    assert moved.label_files != before.label_files and moved.content_sha256 == before.content_sha256
    label_file = copy / lines.label_file.name
    text = label_file.read_text(encoding="utf-8")
    label_file.write_text(text.replace(f"\t{lines.texts[0]}\n", f"\t{lines.texts[0]}零\n", 1), encoding="utf-8")
    assert plan_text_lines(config).content_sha256 != before.content_sha256  # one character more in one label


def test_text_boxes_copied_elsewhere_are_the_same_content(tmp_path):
    root = tmp_path / "mnt" / "pages"
    root.mkdir(parents=True)
    entries = []
    for index in range(4):
        Image.new("RGB", (96, 64), (255, 255, 255 - 20 * index)).save(root / f"page_{index}.png")
        boxes = [{"transcription": f"t{index}", "points": [[4, 4], [40, 4], [40, 20], [4, 20]]}]
        entries.append(f"page_{index}.png\t{json.dumps(boxes)}\n")
    (root / "calibration.txt").write_text("".join(entries[:2]))
    (root / "test.txt").write_text("".join(entries[2:]))

    def config(folder):
        return DataConfig(dataset="text_boxes", path=str(folder), label_file=str(folder / "calibration.txt"),
                          test_label_file=str(folder / "test.txt"), validation_fraction=0)

    before = plan_text_boxes(config(root), training=False)
    copy = copied_elsewhere(root, tmp_path / "home" / "pages")
    assert plan_text_boxes(config(copy), training=False).content_sha256 == before.content_sha256
    (copy / "test.txt").write_text("".join(entries[2:]).replace('"t2"', '"T2"'))  # one transcription
    assert plan_text_boxes(config(copy), training=False).content_sha256 != before.content_sha256


def test_a_touched_image_is_read_by_its_bytes_and_other_bytes_of_the_same_size_are_named(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    (tmp_path / "data").mkdir()
    prepare_data(folder_config(images), tmp_path / "data")
    data = open_data(tmp_path / "data")
    for file in images.rglob("*.*"):  # every mtime moved (a copy, a restore from backup), no byte changed
        os.utime(file, ns=(ELSEWHERE_NS, ELSEWHERE_NS))
    assert sum(len(labels) for _, labels in data.batches("test", 4)) == data.size("test")
    victim = data.files("test")[1]
    flipped = bytearray(open(victim, "rb").read())
    flipped[-1] ^= 0xFF  # the same size, another byte
    with open(victim, "wb") as handle:
        handle.write(flipped)
    with pytest.raises(DataChanged, match=f"image {victim} changed after the data stage recorded it"):
        list(data.batches("test", 4))
