"""A user's own image folders and a paddle.vision network, from a YAML file, through the release flow."""

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from folder_images import write_image_folder  # noqa: E402

from quantgate.config import validate_config  # noqa: E402
from quantgate.config_files import read_yaml  # noqa: E402
from quantgate.flows.release import release  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_the_shipped_examples_are_valid_configs():
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert examples
    for example in examples:
        validate_config(read_yaml(example))


def test_a_yaml_config_on_image_folders_records_preprocessing_and_config(tmp_path):
    images = write_image_folder(tmp_path / "images", classes=3, per_class=8)
    config_file = tmp_path / "release.yaml"
    config_file.write_text(yaml.safe_dump({
        "model_name": "shapes-mobilenet",
        "data": {"dataset": "image_folder", "path": str(images), "test_fraction": 0.25, "calibration_fraction": 0.25,
                 "validation_fraction": 0.125,
                 "transforms": {"resize": 32, "center_crop": 32, "mean": [0.5], "std": [0.5]}},
        "train": {"architecture": "mobilenet_v1", "epochs": 1, "batch_size": 6},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 6},
        "evaluate": {"latency_repeats": 3},
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0,  # plumbing, not accuracy
                 "min_paired_samples": 2},  # a second run is paired with the release on a handful of images
    }))
    config = validate_config(read_yaml(config_file))  # what `quantgate run --config release.yaml` does
    store = tmp_path / "store"
    assert release(config=config, store=str(store)) == "v1"

    version_dir = store / "shapes-mobilenet" / "versions" / "v1"
    data = json.loads((version_dir / "data" / "manifest.json").read_text())
    assert data["config"]["transforms"]["center_crop"] == 32  # what was asked for...
    assert data["metrics"]["preprocessing"]["input_shape"] == [3, 32, 32]  # ...and what the deployed model takes
    assert data["metrics"]["source"]["classes"] == ["class_0", "class_1", "class_2"]
    record = json.loads((version_dir / "version.json").read_text())
    assert record["status"] == "passed" and record["architecture"] == "mobilenet_v1"
    assert record["preprocessing"] == data["metrics"]["preprocessing"]
    assert record["config"] == config.model_dump(mode="json")  # the resolved config, every default included
    assert record["config"]["train"]["nproc"] == 1 and record["config"]["data"]["transforms"]["color"] == "rgb"
    export = json.loads((version_dir / "export" / "manifest.json").read_text())
    assert export["config"]["architecture"] == "mobilenet_v1"
    # The version records the files, not their pixels; the stages read them through DataLoader workers.
    assert (version_dir / "data" / "files.csv.gz").exists() and not (version_dir / "data" / "splits.npz").exists()
    assert data["metrics"]["source"]["files"] == 24 and data["metrics"]["augmentation"]["enabled"] is False
    train = json.loads((version_dir / "train" / "manifest.json").read_text())
    assert train["metrics"]["data_loader"]["num_workers"] == 2

    # The same folder, unchanged: the data stage is reused (so is everything decided by it).
    assert release(config=config, store=str(store)) == "v2"
    again = json.loads((store / "shapes-mobilenet" / "versions" / "v2" / "version.json").read_text())
    assert again["reused"]["data"] == "v1" and again["reused"]["train"] == "v1"

    # One image rewritten: the data stage runs again and so does training, on the new bytes.
    victim = next((images / "class_1").glob("*.png"))
    victim.write_bytes(victim.read_bytes() + b"\0")  # a trailing byte: still a PNG, other bytes
    assert release(config=config, store=str(store)) == "v3"
    changed = json.loads((store / "shapes-mobilenet" / "versions" / "v3" / "version.json").read_text())
    assert "data" not in changed["reused"] and "train" not in changed["reused"]
    assert changed["data_fingerprint_sha256"] != record["data_fingerprint_sha256"]
