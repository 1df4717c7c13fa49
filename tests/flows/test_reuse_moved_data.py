"""Two workers mount one image-folder dataset at different folders: the second run reuses the first's stages."""

import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from folder_images import write_image_folder  # noqa: E402

from quantgate.flows.release import release  # noqa: E402
from quantgate.stages.data import open_data  # noqa: E402

MODEL = "shapes-digits-cnn"


def copied_elsewhere(source: Path, target: Path) -> Path:
    """The folder as another machine holds it: the same bytes and relative paths, other absolute paths, inodes
    and mtimes."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for file in target.rglob("*.*"):
        os.utime(file, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    return target


def folder_config(tiny_config, path: Path):
    return tiny_config(
        model_name=MODEL,
        data={"dataset": "image_folder", "path": str(path), "test_fraction": 0.25, "calibration_fraction": 0.25,
              "validation_fraction": 0.125, "num_workers": 0,
              "transforms": {"resize": 8, "center_crop": 8, "color": "grayscale", "mean": [0.5], "std": [0.5]}},
        train={"epochs": 1, "batch_size": 6},
        quantize={"strategy": "single", "algo": "abs_max", "batch_size": 6},
        gate={"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0,  # plumbing, not accuracy
              "min_paired_samples": 2},
    )


def record(store: Path, version: str, stage: str | None = None) -> dict:
    folder = store / MODEL / "versions" / version
    return json.loads((folder / (f"{stage}/manifest.json" if stage else "version.json")).read_text())


def test_a_copy_of_the_dataset_under_another_mount_reuses_every_stage_and_reads_its_own_files(tmp_path, tiny_config):
    store = tmp_path / "store"
    first = write_image_folder(tmp_path / "mnt" / "a" / "ds", classes=3, per_class=8)
    assert release(config=folder_config(tiny_config, first), store=str(store)) == "v1"

    # The second worker's copy; the first worker's folder is not there (nothing may read it).
    second = copied_elsewhere(first, tmp_path / "home" / "w" / "ds")
    shutil.rmtree(tmp_path / "mnt")
    assert release(config=folder_config(tiny_config, second), store=str(store)) == "v2"
    again = record(store, "v2")
    assert again["status"] == "passed"
    assert {stage: again["reused"].get(stage) for stage in ("data", "train", "export", "quantize", "convert")} == \
        dict.fromkeys(("data", "train", "export", "quantize", "convert"), "v1")
    data = record(store, "v2", "data")
    assert data["input_digest"] == record(store, "v1", "data")["input_digest"]
    # The manifest says where this run read the files, and the stages after it (evaluate ran) read them there.
    assert data["config"]["path"] == str(second) and data["config"]["read_from"] == {"path": str(second.resolve())}
    test_files = open_data(store / MODEL / "versions" / "v2" / "data").files("test")
    assert test_files and all(file.startswith(str(second.resolve())) for file in test_files)

    # One byte more in one image: another dataset, so the data stage and training run again.
    victim = next((second / "class_1").glob("*.png"))
    victim.write_bytes(victim.read_bytes() + b"\0")  # still a PNG, other bytes
    assert release(config=folder_config(tiny_config, second), store=str(store)) == "v3"
    changed = record(store, "v3")
    assert "data" not in changed["reused"] and "train" not in changed["reused"]
    assert record(store, "v3", "data")["input_digest"] != data["input_digest"]
