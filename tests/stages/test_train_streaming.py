"""The train stage reads an image folder through DataLoader workers, augments training images only, and
refuses files changed since the data stage."""

import csv
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import paddle
import pytest
from PIL import Image

from quantgate.config import TransformsConfig, validate_config
from quantgate.models.models import build_model
from quantgate.samples.image_folders import preprocess
from quantgate.stages.data import DataChanged, open_data, prepare_data
from quantgate.stages.train.checkpoint_state import CheckpointBytes
from quantgate.stages.train.errors import ResumeMismatch
from quantgate.stages.train.loop import epoch_batches, train

AUGMENT = {"horizontal_flip": True, "crop_scale": [0.5, 1.0]}
CLASSES, PER_CLASS, SIDE = 3, 30, 16


def image_folder_data(root: Path, augment: dict | None = None) -> Path:
    """3 classes x 30 RGB 16x16 PNGs (a class is a colour plus noise and a bright left edge, so flips and
    crops visibly change an image), and the data stage's folder for them."""
    rng = np.random.default_rng(0)
    for label in range(CLASSES):
        folder = root / "images" / f"class_{label}"
        folder.mkdir(parents=True)
        for index in range(PER_CLASS):
            pixels = rng.integers(0, 90, (SIDE, SIDE, 3))
            pixels[:, :, label] += 120
            pixels[:, :4] = 255
            Image.fromarray(pixels.astype(np.uint8), "RGB").save(folder / f"img_{index}.png")
    out = root / "data"
    out.mkdir()
    config = validate_config({"data": {"dataset": "image_folder", "path": str(root / "images"),
                                       "augment": augment or {}}})
    prepare_data(config.data, out)
    return out


def deterministic(data, split: str) -> np.ndarray:
    """`split`'s images as the recorded transforms alone make them, decoded here without any loader."""
    transforms = TransformsConfig.model_validate(data.spec["transforms"])
    with_pixels = []
    for path in data.files(split):
        with Image.open(path) as image:
            with_pixels.append(preprocess(image.convert("RGB"), transforms))
    return np.stack(with_pixels)


def first_loss(out: Path) -> float:
    with open(out / "steps.csv") as handle:
        return float(next(csv.DictReader(handle))["loss"])


@pytest.fixture(scope="module")
def augmented_data(tmp_path_factory) -> Path:
    return image_folder_data(tmp_path_factory.mktemp("augmented"), AUGMENT)


def test_augmentation_changes_training_batches_per_epoch_but_never_evaluation_inputs(augmented_data):
    data = open_data(augmented_data)
    rows = epoch_batches(data.size("train"), 16, np.random.RandomState(0))[:2]  # as the train stage draws them
    epoch1 = list(data.fetch("train", rows, augment=True, epoch=1))
    epoch2 = list(data.fetch("train", rows, num_workers=2, augment=True, epoch=2))
    again = list(data.fetch("train", rows, num_workers=2, augment=True, epoch=1))
    plain = list(data.fetch("train", rows))
    for (x1, y1), (x2, y2), (xa, _), (xp, yp) in zip(epoch1, epoch2, again, plain):
        assert np.array_equal(y1, y2) and np.array_equal(y1, yp)  # the same rows, only the pixels change
        assert not np.array_equal(x1, x2) and not np.array_equal(x1, xp)
        np.testing.assert_array_equal(x1, xa)  # seeded per image and epoch: workers or not, the same draw
    expected = deterministic(data, "train")
    np.testing.assert_array_equal(np.concatenate([x for x, _ in plain]), expected[np.concatenate(rows)])
    for split in ("test", "calibration"):
        first = np.concatenate([x for x, _ in data.batches(split, 7)])
        second = np.concatenate([x for x, _ in data.batches(split, 32, num_workers=2)])
        np.testing.assert_array_equal(first, second)
        np.testing.assert_array_equal(first, deterministic(data, split))


def test_train_stage_streams_an_image_folder_with_workers_and_records_how(augmented_data, tmp_path):
    config = validate_config({"train": {"epochs": 2, "batch_size": 16}}).train
    out_workers, out_main = tmp_path / "workers", tmp_path / "main"
    out_workers.mkdir(), out_main.mkdir()
    metrics = train(config, augmented_data, out_workers, num_workers=2).metrics
    data = open_data(augmented_data)
    assert metrics["data_loader"] == {"num_workers": 2, "on_disk": True}
    augmentation = metrics["augmentation"]
    assert augmentation["enabled"] is True and augmentation["horizontal_flip"] is True
    assert augmentation["crop_scale"] == [0.5, 1.0] and "epoch" in augmentation["seeding"]
    assert metrics["input_shape"] == [3, SIDE, SIDE] and metrics["num_classes"] == CLASSES
    assert metrics["steps"] == 2 * -(-data.size("train") // 16) and metrics["samples_per_second"] > 0
    # Decoding in two worker processes trains exactly what decoding in this one does.
    train(config, augmented_data, out_main, num_workers=0)
    with np.load(out_workers / "weights.npz") as workers, np.load(out_main / "weights.npz") as main:
        assert set(workers.files) == set(main.files)
        for name in workers.files:
            np.testing.assert_array_equal(workers[name], main[name])
    # Training images were augmented: the first step's loss differs from that on the same rows un-augmented.
    plain, out_plain = image_folder_data(tmp_path / "plain"), tmp_path / "plain_out"
    out_plain.mkdir()
    # the same split (file names and order), only augmentation differs
    assert [Path(f).relative_to(plain.parent) for f in open_data(plain).files("train")] == \
        [Path(f).relative_to(augmented_data.parent) for f in data.files("train")]
    train(config.model_copy(update={"epochs": 1}), plain, out_plain)
    assert first_loss(out_plain) != first_loss(out_workers)
    # The reference logits are the shipped weights on the un-augmented test images.
    with np.load(out_workers / "weights.npz") as stored:
        model = build_model("digits_cnn", CLASSES, (3, SIDE, SIDE))
        model.set_state_dict({name: paddle.to_tensor(stored[name]) for name in stored.files})
    model.eval()
    with paddle.no_grad():
        expected = model(paddle.to_tensor(deterministic(data, "test"))).numpy()
    np.testing.assert_allclose(np.load(out_workers / "reference_logits.npy"), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change", ["same_size", "bytes"])
def test_an_image_changed_after_the_data_stage_stops_training_naming_it(tmp_path, change):
    data_dir = image_folder_data(tmp_path)
    changed = Path(open_data(data_dir).files("train")[5])
    if change == "same_size":  # other bytes, same size: found by the sha256 (a file only touched is still read)
        content = bytearray(changed.read_bytes())
        content[-1] ^= 0xFF
        changed.write_bytes(bytes(content))
    else:
        with Image.open(changed) as image:
            image.transpose(Image.Transpose.FLIP_TOP_BOTTOM).save(changed)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataChanged, match=f"image {changed} changed after the data stage") as caught:
        train(validate_config({"train": {"epochs": 1}}).train, data_dir, out, num_workers=2)
    assert "run again" in str(caught.value)
    assert not (out / "weights.npz").exists()


def test_resuming_an_augmented_run_matches_the_uninterrupted_one_and_refuses_other_data(augmented_data, tmp_path):
    checkpoints = {}

    @contextmanager
    def sink(name):
        folder = tmp_path / "checkpoints" / name
        folder.mkdir(parents=True)
        yield folder
        checkpoints[name] = CheckpointBytes(name, {f.name: f.read_bytes() for f in folder.iterdir()})

    config = validate_config({"train": {"epochs": 2, "batch_size": 16}}).train
    outs = {label: tmp_path / label for label in ("whole", "first", "resumed", "other")}
    for out in outs.values():
        out.mkdir()
    train(config, augmented_data, outs["whole"], num_workers=2)
    train(config.model_copy(update={"epochs": 1}), augmented_data, outs["first"], checkpoints=sink)
    # The second epoch draws its own augmentation (epoch 2), as in the uninterrupted run.
    train(config, augmented_data, outs["resumed"], resume_from=checkpoints["epoch-0001"], num_workers=2)
    with np.load(outs["whole"] / "weights.npz") as whole, np.load(outs["resumed"] / "weights.npz") as resumed:
        for name in whole.files:
            np.testing.assert_array_equal(whole[name], resumed[name])
    other = image_folder_data(tmp_path / "plain")  # the same images, without augmentation: other data
    with pytest.raises(ResumeMismatch, match="the training data differ from the checkpoint's"):
        train(config, other, outs["other"], resume_from=checkpoints["epoch-0001"])
