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
from quantgate.bundle import engines, open_bundle
from quantgate.bundle.latencies import latency_record, rank_runtimes, recorded_latencies
from quantgate.bundle.manifest import sealed_json, sha256_file
from quantgate.cli import main
from quantgate.int8.weight_range import onnxruntime_weight_bits
from quantgate.runtimes.cpu import cpu_record
from quantgate.samples.reading import open_data
from quantgate.stages.evaluate.outputs import PREDICTIONS_FILE, runtime_predictions_file
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE

MODEL = "shapes"
# Two gated runtimes: Paddle Inference comes with paddlepaddle, OpenVINO is an optional install.
RUNTIMES = ["onnxruntime", "paddle_inference"]
# A policy that cannot pass: no INT8 model of this tiny network is 1000x faster than its FP32 model.
FAILING = ["--set", "gate.min_speedup=1000"]
ORT = ("--runtime", "onnxruntime")  # the runtime whose stored predictions a test compares with


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
    here = onnxruntime_weight_bits(cpu_record()["flags"])  # the flow converted on this machine
    assert (card["quantization"]["int8_weight_bits"], card["quantization"]["int8_weight_bits_why"]) == \
        (here.bits, here.why)
    markdown = (bundle_dir / "model_card.md").read_text()
    assert "# shapes v1" in markdown and record["data_fingerprint_sha256"] in markdown
    assert f"weights of the INT8 ONNX model: {here.bits} bits" in markdown


def test_predict_on_the_test_images_gives_the_predictions_the_gate_stored(runs, bundle_dir, capsys):
    assert quantgate("predict", str(bundle_dir), *runs.test_files, "--json", "--top-k", "2", *ORT) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["image"] for p in printed["predictions"]] == runs.test_files
    assert [p["top"][0]["index"] for p in printed["predictions"]] == runs.int8_pred.tolist()
    assert all(len(p["top"]) == 2 and p["top"][0]["probability"] >= p["top"][1]["probability"]
               for p in printed["predictions"])

    assert quantgate("predict", str(bundle_dir), *runs.test_files, "--precision", "fp32", "--json", *ORT) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["top"][0]["index"] for p in printed["predictions"]] == runs.fp32_pred.tolist()

    assert quantgate("predict", str(bundle_dir), *runs.test_files, *ORT) == 0
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


# -- the runtime predict picks: the fastest one that passed the gate and is installed here ----------------------

def evaluation_of_v1(runs: BundleStore) -> dict:
    """v1's evaluate stage manifest: its config and metrics."""
    return runs.store.read_manifest(runs.store.finalized_stage_ref(runs.store.version(MODEL, "v1"), "evaluate"))


def stored_int8(runs: BundleStore, runtime: str) -> list[int]:
    """The INT8 predictions v1's evaluation stored for `runtime`."""
    evaluated = runs.store.finalized_stage_ref(runs.store.version(MODEL, "v1"), "evaluate")
    primary = runs.store.read_manifest(evaluated)["metrics"]["primary_runtime"]
    with np.load(runs.store.verify_stage(evaluated) / runtime_predictions_file(runtime, primary)) as stored:
        return stored["int8_pred"].tolist()


def edited(bundle_dir: Path, folder: Path, change) -> Path:
    """A copy of the bundle whose manifest `change` edited, sealed again: as quantgate would have written it."""
    copy = Path(shutil.copytree(bundle_dir, folder))
    manifest = json.loads((copy / "bundle.json").read_text())
    change(manifest)
    (copy / "bundle.json").write_bytes(sealed_json(manifest))
    return copy


def set_latency(manifest: dict, batch_size: int, ms: dict[str, float], precision: str = "int8") -> dict:
    """The manifest with `precision`'s recorded p50 at `batch_size` set per runtime to `ms`."""
    for runtime, points in manifest["latencies"]["runtimes"].items():
        for point in points:
            if point["batch_size"] == batch_size and runtime in ms:
                point[f"latency_ms_p50_{precision}"] = ms[runtime]
    return manifest


def machine(manifest: dict) -> str:
    measured_on = manifest["latencies"]["measured_on"]
    cpu = measured_on["cpu"]
    return f"{cpu['model']} [{' '.join(cpu['flags'])}] with {measured_on['threads']} threads"


def test_a_bundle_records_each_runtimes_latencies_at_batch_1_and_the_evaluated_batch_and_the_machine(runs, bundle_dir):
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    evaluation = evaluation_of_v1(runs)
    metrics, size = evaluation["metrics"], evaluation["metrics"]["latency_batch_size"]
    assert manifest["format_version"] == 4 and size > 1
    assert manifest["latencies"] == {
        "measured_on": {"cpu": metrics["cpu"], "threads": evaluation["config"]["threads"]}, "per": "call",
        "runtimes": {runtime: [
            {"batch_size": 1, "latency_ms_p50_fp32": entry["latency_ms_p50_fp32_batch1"],
             "latency_ms_p50_int8": entry["latency_ms_p50_int8_batch1"]},
            {"batch_size": size, "latency_ms_p50_fp32": entry["latency_ms_p50_fp32"],
             "latency_ms_p50_int8": entry["latency_ms_p50_int8"]}] for runtime, entry in metrics["runtimes"].items()}}
    assert sorted(manifest["latencies"]["runtimes"]) == RUNTIMES
    # each runtime's verdict is the gate record's, beside the version's
    assert {runtime: verdict["passed"] for runtime, verdict in manifest["gate"]["runtimes"].items()} == \
        {runtime: True for runtime in RUNTIMES}
    assert f"at batch {size} and at batch 1" in (bundle_dir / "model_card.md").read_text()


def test_predict_without_runtime_runs_the_passing_runtime_fastest_at_batch_1_and_says_why(runs, bundle_dir, capsys):
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    int8_batch1 = {runtime: points[0]["latency_ms_p50_int8"] for runtime, points in
                   manifest["latencies"]["runtimes"].items()}
    fastest = min(int8_batch1, key=int8_batch1.get)  # as the run measured them: both are installed here
    assert quantgate("predict", str(bundle_dir), *runs.test_files) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"bundle shapes/v1: {len(manifest['files'])} files verified; {fastest} INT8 model"
    assert lines[1].startswith(f"runtime {fastest}: the fastest INT8 at batch 1 of the runtimes that passed the gate "
                               f"({fastest} ")
    assert lines[1].endswith(f"; median per call, measured by the run on {machine(manifest)})")
    assert [line.split(": ", 1)[1].split()[0] for line in lines[2:]] == \
        [runs.classes[k] for k in stored_int8(runs, fastest)]


def test_the_ranking_follows_the_recorded_latencies_and_the_gates_verdicts(bundle_dir):
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    size = manifest["latencies"]["runtimes"]["onnxruntime"][1]["batch_size"]

    faster_paddle = set_latency(manifest, 1, {"onnxruntime": 4.6, "paddle_inference": 2.3})["latencies"]
    ranked = rank_runtimes(manifest, faster_paddle)
    assert (ranked.order, ranked.batch_size, ranked.latency_ms) == \
        (("paddle_inference", "onnxruntime"), 1, {"paddle_inference": 2.3, "onnxruntime": 4.6})
    ranked = rank_runtimes(manifest, set_latency(manifest, 1, {"onnxruntime": 1.0})["latencies"])
    assert ranked.order == ("onnxruntime", "paddle_inference")
    # --precision fp32 runs the FP32 models: ranked by their latency
    fp32 = set_latency(manifest, 1, {"onnxruntime": 9.0, "paddle_inference": 3.0}, "fp32")["latencies"]
    assert rank_runtimes(manifest, fp32, "fp32").order == ("paddle_inference", "onnxruntime")

    # A version evaluated before batch 1 was timed: ranked at its evaluated batch.
    before = {"onnxruntime": {"latency_ms_p50_fp32": 3.0, "latency_ms_p50_int8": 2.0},
              "paddle_inference": {"latency_ms_p50_fp32": 3.0, "latency_ms_p50_int8": 1.5}}
    record = latency_record(before, None, 2, size)
    assert record["runtimes"]["onnxruntime"] == [{"batch_size": size, "latency_ms_p50_fp32": 3.0,
                                                  "latency_ms_p50_int8": 2.0}]
    ranked = rank_runtimes(manifest, record)
    assert (ranked.order, ranked.batch_size) == (("paddle_inference", "onnxruntime"), size)

    # A runtime the gate did not pass is left out, whatever its latency.
    failing = json.loads(json.dumps(manifest))
    failing["gate"]["runtimes"]["paddle_inference"] = {"passed": False, "failed": ["speedup"]}
    ranked = rank_runtimes(failing, set_latency(failing, 1, {"paddle_inference": 0.1})["latencies"])
    assert (ranked.order, ranked.failed) == (("onnxruntime",), {"paddle_inference": ("speedup",)})
    # No latencies to rank by: the default runtime first. No verdict per runtime: the default runtime alone.
    assert rank_runtimes(manifest, latency_record({}, None, 2, None)).order == ("onnxruntime", "paddle_inference")
    del failing["gate"]
    assert rank_runtimes(failing, manifest["latencies"]).order == ("onnxruntime",)


def test_predict_falls_back_down_the_ranking_when_a_runtime_is_not_installed_here(runs, bundle_dir, tmp_path,
                                                                                  capsys, monkeypatch):
    faster_paddle = edited(bundle_dir, tmp_path / "bundle",
                           lambda manifest: set_latency(manifest, 1, {"onnxruntime": 4.6, "paddle_inference": 2.3}))
    manifest = json.loads((faster_paddle / "bundle.json").read_text())
    # predict asks engines.runtime_installed (importlib.util.find_spec of the runtime's package) before it loads one
    monkeypatch.setattr(engines, "runtime_installed", lambda runtime: runtime != "paddle_inference")
    assert quantgate("predict", str(faster_paddle), *runs.test_files) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; onnxruntime INT8 model")
    assert lines[1] == ("runtime onnxruntime: the fastest INT8 at batch 1 of the runtimes that passed the gate is "
                        "paddle_inference (paddle_inference 2.3 ms, onnxruntime 4.6 ms; median per call, measured by "
                        f"the run on {machine(manifest)}); paddle_inference is not installed here, so onnxruntime")
    assert [line.split(": ", 1)[1].split()[0] for line in lines[2:]] == \
        [runs.classes[k] for k in stored_int8(runs, "onnxruntime")]
    # Named with --runtime, a runtime that is not installed is refused through the same check.
    assert quantgate("predict", str(faster_paddle), runs.test_files[0], "--runtime", "paddle_inference") == 2
    assert "runtime paddle_inference needs the Python package paddle, which is not installed here" in \
        capsys.readouterr().err

    monkeypatch.setattr(engines, "runtime_installed", lambda runtime: False)
    assert quantgate("predict", str(faster_paddle), runs.test_files[0]) == 2
    err = capsys.readouterr().err
    assert "none of the runtimes of bundle" in err and "that passed the gate is installed here" in err
    assert "paddle_inference needs the Python package paddle" in err and "onnxruntime needs the Python package" in err


def test_predict_refuses_a_runtime_the_gate_did_not_pass_and_leaves_it_out_of_its_choice(runs, bundle_dir, tmp_path,
                                                                                        capsys):
    def fail_paddle(manifest):
        manifest["gate"]["runtimes"]["paddle_inference"] = {"passed": False, "failed": ["speedup"]}
        set_latency(manifest, 1, {"paddle_inference": 0.001})

    failed = edited(bundle_dir, tmp_path / "bundle", fail_paddle)
    assert quantgate("predict", str(failed), runs.test_files[0], "--runtime", "paddle_inference") == 2
    assert ("bundle shapes/v1's gate did not pass runtime paddle_inference (failed speedup); choose one it passed "
            "with --runtime (onnxruntime), or leave --runtime out") in capsys.readouterr().err
    assert quantgate("predict", str(failed), runs.test_files[0], "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runtime"] == "onnxruntime"
    assert printed["runtime_choice"].startswith("runtime onnxruntime: the only runtime of the bundle that passed the "
                                                "gate (INT8 at batch 1: onnxruntime ")
    assert printed["runtime_choice"].endswith("; left out: paddle_inference (did not pass the gate: speedup)")


def with_card(bundle_dir: Path, folder: Path, change) -> Path:
    """A copy of the bundle whose model card `change(card)` edited, its manifest sealed again."""
    copy = Path(shutil.copytree(bundle_dir, folder))
    card = json.loads((copy / "model_card.json").read_text())
    change(card)
    (copy / "model_card.json").write_text(json.dumps(card, sort_keys=True, indent=2) + "\n")
    manifest = json.loads((copy / "bundle.json").read_text())
    manifest["files"]["model_card.json"] = dict(zip(("sha256", "bytes"), sha256_file(copy / "model_card.json")))
    (copy / "bundle.json").write_bytes(sealed_json(manifest))
    return copy


@pytest.mark.parametrize("bits, warned", [(8, True), (7, False)])
def test_predict_warns_when_this_cpu_saturates_the_bundles_8_bit_weights(runs, bundle_dir, tmp_path, capsys,
                                                                          monkeypatch, bits, warned):
    copy = with_card(bundle_dir, tmp_path / "copy", lambda card: card["quantization"].update(int8_weight_bits=bits))
    monkeypatch.setattr("quantgate.bundle.predict.cpu_record", lambda: {"flags": ["avx2"]})  # an AVX2-only CPU
    assert quantgate("predict", str(copy), runs.test_files[0], "--json", *ORT) == 0
    err = capsys.readouterr().err
    assert ("note: the INT8 model has 8-bit weights, but this CPU has AVX2 but no VNNI/AMX" in err) is warned
    assert quantgate("predict", str(copy), runs.test_files[0], "--precision", "fp32", "--json", *ORT) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_bundle_of_an_older_format_still_predicts_ranked_by_its_model_cards_latencies(runs, bundle_dir, tmp_path,
                                                                                       capsys):
    # As a bundle written before format 4: no "latencies", and a card whose evaluation has no batch-1 numbers.
    old = Path(shutil.copytree(bundle_dir, tmp_path / "old"))
    card = json.loads((old / "model_card.json").read_text())
    for entry in card["evaluation"]["runtimes"].values():
        for key in [key for key in entry if key.endswith("_batch1")]:
            del entry[key]
    (old / "model_card.json").write_text(json.dumps(card, sort_keys=True, indent=2) + "\n")
    manifest = json.loads((old / "bundle.json").read_text())
    del manifest["latencies"]
    manifest["format_version"] = 1
    manifest["files"]["model_card.json"] = dict(zip(("sha256", "bytes"), sha256_file(old / "model_card.json")))
    (old / "bundle.json").write_bytes(sealed_json(manifest))

    size = card["evaluation"]["latency_batch_size"]
    int8 = {runtime: card["evaluation"]["runtimes"][runtime]["latency_ms_p50_int8"] for runtime in RUNTIMES}
    fastest = min(int8, key=int8.get)
    assert recorded_latencies(open_bundle(old))["runtimes"][fastest] == [
        {"batch_size": size, "latency_ms_p50_fp32": card["evaluation"]["runtimes"][fastest]["latency_ms_p50_fp32"],
         "latency_ms_p50_int8": int8[fastest]}]
    assert quantgate("predict", str(old), *runs.test_files, "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runtime"] == fastest
    assert printed["runtime_choice"].startswith(f"runtime {fastest}: the fastest INT8 at batch {size} of the runtimes "
                                                "that passed the gate")
    assert [p["top"][0]["index"] for p in printed["predictions"]] == stored_int8(runs, fastest)
