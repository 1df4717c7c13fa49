"""A network saved by Paddle 3.3.1's default paddle.jit.save (PIR) goes through `quantgate run` to a gated release:
FP32 ONNX from paddle2onnx 2.x (made by the export stage, checked against Paddle), INT8 calibrated by quantgate on
that ONNX graph (PaddleSlim reads no PIR program), lowered by the convert stage, judged in onnxruntime and OpenVINO;
the records say who calibrated. Paddle Inference, listed too, is not applicable to a PIR model (no Paddle INT8 program):
the evaluation and the gate say why and judge the others, the bundle ships nothing of it, predict names the reason;
its FP32 reading of the test split in Paddle Inference is still recorded beside, and shown in the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from folder_images import write_image_folder
from test_source_pir import SAVE_TINY_MODEL, run_paddle

from quantgate.artifacts import ArtifactStore
from quantgate.cli import main

MODEL = "tiny-pir"
CALIBRATED_BY = "quantgate on the ONNX graph (PaddleSlim reads no PIR program)"


@pytest.fixture(scope="module")
def pir_run(quantgate_cli, tmp_path_factory):
    base = tmp_path_factory.mktemp("pir-release")
    saved = run_paddle(SAVE_TINY_MODEL, True, base / "model" / "inference")
    assert saved.returncode == 0, saved.stderr[-2000:]
    assert (base / "model" / "inference.json").is_file()  # Paddle 3's default: a PIR program
    images = write_image_folder(base / "images", classes=5, per_class=20, size=(18, 18))
    config = base / "config.yaml"
    config.write_text(yaml.safe_dump({
        "model_name": MODEL, "trained_model": {"path": str(base / "model")},
        "data": {"dataset": "image_folder", "path": str(images), "num_workers": 0,
                 "transforms": {"resize": 16, "center_crop": 16, "mean": [0.5], "std": [0.5]}},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 8},
        "evaluate": {"latency_repeats": 3, "runtimes": ["onnxruntime", "openvino", "paddle_inference"]},
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0},  # plumbing, not accuracy
    }))
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(base / "store"), timeout=900)
    return base / "store", result, images


def test_a_pir_model_runs_to_a_gated_release_with_int8_calibrated_on_its_onnx_graph(pir_run):
    root, result, _ = pir_run
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    store = ArtifactStore(root)
    version = store.version(MODEL, "v1")
    record = store.version_record(version)
    assert record["status"] == ("passed" if result.returncode == 0 else "failed")
    assert set(record["runtimes"]) == {"onnxruntime", "openvino"}
    quantize = store.read_manifest(store.finalized_stage_ref(version, "quantize"))["metrics"]
    assert quantize["calibrated_by"] == CALIBRATED_BY and quantize["quantize_linear_ops"] > 0
    export = store.read_manifest(store.finalized_stage_ref(version, "export"))["metrics"]
    assert export["program_format"] == "pir" and export["fp32_onnx"]["converter"]["version"].startswith("2.")
    convert = store.read_manifest(store.finalized_stage_ref(version, "convert"))["metrics"]
    assert convert["int8"]["calibrated_by"] == CALIBRATED_BY
    report = store.verify_stage(store.finalized_stage_ref(version, "report"))
    assert CALIBRATED_BY in (report / "report.md").read_text(encoding="utf-8")
    json.dumps(record)  # the record is plain JSON


def test_paddle_inference_still_reads_the_pir_programs_fp32_on_the_test_split(pir_run):
    root, _, _ = pir_run
    store = ArtifactStore(root)
    version = store.version(MODEL, "v1")
    evaluation = store.read_manifest(store.finalized_stage_ref(version, "evaluate"))["metrics"]
    paddle = evaluation["paddle_inference_fp32"]
    assert paddle["ran"] is True, paddle
    assert isinstance(paddle["onednn"], bool) and paddle["compared_with"] == "onnxruntime fp32"
    # The export stage checked the ONNX FP32 model against Paddle's outputs: both read the split alike.
    assert paddle["same_prediction_pct"] >= 95.0
    assert abs(paddle["top1_pct"] - evaluation["runtimes"]["onnxruntime"]["fp32_top1_pct"]) <= 5.0
    report = store.verify_stage(store.finalized_stage_ref(version, "report"))
    assert "Paddle Inference (PIR program): FP32" in (report / "report.md").read_text(encoding="utf-8")


def test_paddle_inference_is_not_applicable_to_a_pir_model_in_the_gate_the_bundle_and_predict(pir_run, tmp_path,
                                                                                               capsys):
    root, result, images = pir_run
    store = ArtifactStore(root)
    version = store.version(MODEL, "v1")
    evaluation = store.read_manifest(store.finalized_stage_ref(version, "evaluate"))["metrics"]
    assert set(evaluation["runtimes"]) == {"onnxruntime", "openvino"}
    assert "PIR program" in evaluation["runtimes_not_applicable"]["paddle_inference"]

    gate = store.read_manifest(store.finalized_stage_ref(version, "gate"))["metrics"]
    assert set(gate["runtimes"]) == {"onnxruntime", "openvino"}  # the verdict is formed from these alone
    assert gate["passed"] == all(entry["passed"] for entry in gate["runtimes"].values()) == (result.returncode == 0)
    said = [c for c in gate["criteria"] if c["name"].startswith("paddle_inference.")]
    assert [(c["name"], c["verdict"]) for c in said] == [("paddle_inference.runtime", "not_applicable")]
    assert "no Paddle INT8 program" in said[0]["note"] and gate["runtimes_not_applicable"]["paddle_inference"]
    if result.returncode != 0:
        pytest.skip("the gate did not pass on this machine: nothing to bundle")

    out = tmp_path / "bundle"
    assert main(["bundle", "v1", "--out", str(out), "--store", str(root)]) == 0
    manifest = json.loads((out / "bundle.json").read_text())
    assert set(manifest["runtimes"]) == {"onnxruntime", "openvino"}
    assert not any("paddle_inference" in path for path in manifest["files"])
    assert "PIR program" in manifest["runtimes_not_applicable"]["paddle_inference"]
    image = str(next(Path(images).rglob("*.png")))
    capsys.readouterr()
    assert main(["predict", str(out), image, "--runtime", "paddle_inference"]) == 2
    error = capsys.readouterr().err
    assert "paddle_inference is not applicable" in error and "PIR program" in error
