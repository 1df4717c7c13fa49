"""`quantgate bundle` and `quantgate predict` on a store made by real `quantgate run`s over an image folder."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from folder_images import write_image_folder

from quantgate.artifacts import ArtifactStore
from quantgate.cli import main
from quantgate.stages.data.reading import open_data
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE, runtime_predictions_file
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE

MODEL = "shapes"
# Two gated runtimes: Paddle Inference comes with paddlepaddle, OpenVINO is an optional install.
RUNTIMES = ["onnxruntime", "paddle_inference"]
# A policy that cannot pass: no INT8 model of this tiny network is 1000x faster than its FP32 model.
FAILING = ["--set", "gate.min_speedup=1000"]


@dataclass(frozen=True)
class BundleStore:
    root: Path
    store: ArtifactStore
    test_files: list[str]
    int8_pred: np.ndarray
    fp32_pred: np.ndarray
    classes: list[str]


@pytest.fixture(scope="module")
def runs(quantgate_cli, tmp_path_factory) -> BundleStore:
    """v1 passed (and is `release`), v2 failed (and is `latest`): two real runs over one image folder."""
    base = tmp_path_factory.mktemp("bundle")
    images = write_image_folder(base / "images", classes=3, per_class=12)
    config = base / "shapes.yaml"
    config.write_text(yaml.safe_dump({
        "model_name": MODEL,
        "data": {"dataset": "image_folder", "path": str(images), "test_fraction": 0.25, "calibration_fraction": 0.25,
                 "validation_fraction": 0.125, "transforms": {"resize": 16, "center_crop": 16, "mean": [0.5],
                                                               "std": [0.5]}},
        "train": {"epochs": 2, "batch_size": 8},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 8},
        "evaluate": {"latency_repeats": 3, "runtimes": RUNTIMES},
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0,  # plumbing, not accuracy
                 "min_paired_samples": 2},  # a second run is paired with the release on a handful of images
    }))
    root = base / "store"
    for extra, expected in (([], 0), (FAILING, 1)):
        result = quantgate_cli.run("run", "--config", str(config), "--store", str(root), *extra)
        assert result.returncode == expected, result.stdout[-2000:] + result.stderr[-3000:]
    store = ArtifactStore(root)
    v1 = store.version(MODEL, "v1")
    data = open_data(store.verify_stage(store.finalized_stage_ref(v1, "data")))
    with np.load(store.verify_stage(store.finalized_stage_ref(v1, "evaluate")) / PREDICTIONS_FILE) as stored:
        int8_pred, fp32_pred = stored["int8_pred"], stored["fp32_pred"]
    return BundleStore(root, store, data.files("test"), int8_pred, fp32_pred, data.classes)


@pytest.fixture(scope="module")
def bundle_dir(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundles") / "shapes-release"
    assert main(["bundle", "release", "--out", str(out), "--store", str(runs.root)]) == 0
    return out


def quantgate(*args: str) -> int:
    return main(list(args))


def gated_sha256(runs: BundleStore, runtime: str, precision: str) -> list[str]:
    """The sha256 of each file of the model `runtime` ran for `precision` when v1 was evaluated."""
    v1 = runs.store.version(MODEL, "v1")
    evaluated = runs.store.read_manifest(runs.store.finalized_stage_ref(v1, "evaluate"))["metrics"]
    source = evaluated["runtimes"][runtime][f"{precision}_source"]
    stage = runs.store.read_manifest(runs.store.finalized_stage_ref(v1, source["stage"]))
    return [stage["files"][name]["sha256"] for name in source["files"]]


def test_a_bundle_holds_each_gated_runtime_model_the_records_and_a_sealed_manifest(runs, bundle_dir):
    files = sorted(path.relative_to(bundle_dir).as_posix() for path in bundle_dir.rglob("*") if path.is_file())
    assert {"bundle.json", "classes.json", "preprocessing.json", "model_card.md", "model_card.json",
            "onnxruntime/fp32.onnx", "onnxruntime/int8.onnx"} <= set(files)
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    assert (manifest["model"], manifest["version"], manifest["default_runtime"]) == (MODEL, "v1", "onnxruntime")
    assert sorted(manifest["files"]) == [name for name in files if name != "bundle.json"]
    v1 = runs.store.version(MODEL, "v1")
    record = runs.store.version_record(v1)
    # Every model is byte for byte the one the gate judged in that runtime.
    for runtime, forms in manifest["runtimes"].items():
        for precision, paths in forms.items():
            assert [manifest["files"][path]["sha256"] for path in paths] == gated_sha256(runs, runtime, precision)
    assert json.loads((bundle_dir / "classes.json").read_text()) == runs.classes
    assert json.loads((bundle_dir / "preprocessing.json").read_text()) == record["preprocessing"]

    card = json.loads((bundle_dir / "model_card.json").read_text())
    assert card["data"]["fingerprint_sha256"] == record["data_fingerprint_sha256"]
    assert card["lineage"]["stages"] == record["stages"]
    assert card["lineage"]["version_record_sha256"] == record["record_sha256"]
    assert card["gate"]["runtimes"]["onnxruntime"]["passed"] is True
    assert card["training"]["amp"] == record["amp"]
    assert card["evaluation"]["runtimes"]["onnxruntime"]["int8_top1_pct"] == record["metrics"]["int8_top1_pct"]
    assert card["sizes_bytes"]["onnxruntime"]["int8"] == (bundle_dir / "onnxruntime" / "int8.onnx").stat().st_size
    markdown = (bundle_dir / "model_card.md").read_text()
    assert "# shapes v1" in markdown and record["data_fingerprint_sha256"] in markdown


def test_predict_on_the_test_images_gives_the_predictions_the_gate_stored(runs, bundle_dir, capsys):
    assert quantgate("predict", str(bundle_dir), *runs.test_files, "--json", "--top-k", "2") == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["image"] for p in printed["predictions"]] == runs.test_files
    assert [p["top"][0]["index"] for p in printed["predictions"]] == runs.int8_pred.tolist()
    assert all(len(p["top"]) == 2 and p["top"][0]["probability"] >= p["top"][1]["probability"]
               for p in printed["predictions"])

    assert quantgate("predict", str(bundle_dir), *runs.test_files, "--precision", "fp32", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["top"][0]["index"] for p in printed["predictions"]] == runs.fp32_pred.tolist()

    assert quantgate("predict", str(bundle_dir), *runs.test_files) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = len(json.loads((bundle_dir / "bundle.json").read_text())["files"])
    assert lines[0] == f"bundle shapes/v1: {listed} files verified; onnxruntime INT8 model"
    assert [line.split(": ", 1)[1].split()[0] for line in lines[1:]] == [runs.classes[k] for k in runs.int8_pred]


@pytest.mark.parametrize("tamper, named", [
    ("flip", "onnxruntime/int8.onnx does not match bundle.json"),
    ("extra", "notes.txt is not listed in bundle.json"),
    ("missing", "classes.json is missing"),
    ("manifest", "bundle.json was edited after it was written"),
])
def test_a_tampered_bundle_is_refused_naming_the_file(runs, bundle_dir, tmp_path, capsys, tamper, named):
    copy = Path(shutil.copytree(bundle_dir, tmp_path / "bundle"))
    if tamper == "flip":
        model = copy / "onnxruntime" / "int8.onnx"
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0x01
        model.write_bytes(bytes(data))
    elif tamper == "extra":
        (copy / "notes.txt").write_text("not part of the bundle")
    elif tamper == "missing":
        (copy / "classes.json").unlink()
    else:
        manifest = json.loads((copy / "bundle.json").read_text())
        manifest["default_runtime"] = "openvino"
        (copy / "bundle.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    assert quantgate("predict", str(copy), runs.test_files[0]) == 2
    err = capsys.readouterr().err
    assert str(copy) in err and named in err and "quantgate bundle VERSION --out NEW_DIR" in err


def test_bundling_a_failed_version_is_refused_and_writes_nothing(runs, tmp_path, capsys):
    out = tmp_path / "bundles" / "failed"
    assert quantgate("bundle", "latest", "--out", str(out), "--store", str(runs.root)) == 1
    err = capsys.readouterr().err
    assert "refusing to bundle shapes/v2 (status 'failed'): the run's gate: failed speedup" in err
    assert "quantgate gate v2" in err and "nothing was written" in err
    assert not (tmp_path / "bundles").exists()  # not even the parent folder or a staging folder


def test_bundle_never_writes_into_a_folder_that_holds_something(runs, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert quantgate("bundle", "v1", "--out", str(out), "--store", str(runs.root)) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]  # no staging folder left beside it


def test_predict_refuses_a_runtime_the_bundle_does_not_hold_and_an_unreadable_image(runs, bundle_dir, tmp_path,
                                                                                      capsys):
    assert quantgate("predict", str(bundle_dir), runs.test_files[0], "--runtime", "tensorrt") == 2
    assert "holds no tensorrt model (it holds onnxruntime, paddle_inference); choose one of those with --runtime" in \
        capsys.readouterr().err
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    assert quantgate("predict", str(bundle_dir), str(broken)) == 2
    assert f"image {broken} cannot be decoded" in capsys.readouterr().err


def test_predict_with_paddle_inference_gives_the_predictions_the_gate_stored_for_it(runs, bundle_dir, capsys):
    v1 = runs.store.version(MODEL, "v1")
    evaluated = runs.store.finalized_stage_ref(v1, "evaluate")
    primary = runs.store.read_manifest(evaluated)["metrics"]["primary_runtime"]
    with np.load(runs.store.verify_stage(evaluated) / runtime_predictions_file("paddle_inference", primary)) as stored:
        int8_pred = stored["int8_pred"]
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    assert sorted(manifest["runtimes"]) == RUNTIMES
    assert manifest["runtimes"]["paddle_inference"]["int8"] == [f"paddle_inference/int8/{MODEL_FILE}",
                                                                f"paddle_inference/int8/{PARAMS_FILE}"]

    assert quantgate("predict", str(bundle_dir), *runs.test_files, "--runtime", "paddle_inference", "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runtime"] == "paddle_inference"
    assert [p["top"][0]["index"] for p in printed["predictions"]] == int8_pred.tolist()
