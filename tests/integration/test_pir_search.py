"""The default `strategy: search` on a PIR model: its candidates are calibrated by quantgate on the export's FP32 ONNX
graph (PaddleSlim reads no PIR program) and judged through the same seam as PaddleSlim's, in onnxruntime and
OpenVINO; a policy the all-INT8 recipe misses makes it fall back, a fall-back being the layer's Q/DQ pairs dropped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1] / "stages"))
from folder_images import write_image_folder
from test_source_pir import run_paddle

from quantgate.artifacts import ArtifactStore
from quantgate.artifacts.cache import ContentCache
from quantgate.config import EvaluateConfig, GatePolicy, QuantizeConfig
from quantgate.stages.quantize.outputs import CALIBRATED_ONNX_FILE, PROGRAM_SCALES_FILE, SEARCH_FILE
from quantgate.stages.quantize.runtime_checks import NOT_JUDGED, RUNTIMES_KEY
from quantgate.stages.quantize.search import search_quantization

MODEL = "tiny-pir-search"
RUNTIMES = ("onnxruntime", "openvino")
# The classifier's rows nearly equal: the classes differ by less than its INT8 grid, so INT8 flips many argmaxes
# while the same classifier in FP32 does not; two convolutions, so the lowering has INT8 left to lower without it.
# Saved by Paddle 3.3.1's default jit.save (PIR).
SAVE_NEAR_TIE_MODEL = """
import sys, paddle
paddle.seed(0)
net = paddle.nn.Sequential(
    paddle.nn.Conv2D(3, 4, 3), paddle.nn.ReLU(), paddle.nn.Conv2D(4, 4, 3), paddle.nn.ReLU(), paddle.nn.Flatten(),
    paddle.nn.Linear(4 * 12 * 12, 5))
common = paddle.randn([4 * 12 * 12, 1])
net[5].weight.set_value(common.tile([1, 5]) + 1e-3 * paddle.randn([4 * 12 * 12, 5]))
net.eval()
paddle.jit.save(net, sys.argv[1], input_spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "x")])
"""


@pytest.fixture(scope="module")
def searched(quantgate_cli, tmp_path_factory):
    base = tmp_path_factory.mktemp("pir-search")
    saved = run_paddle(SAVE_NEAR_TIE_MODEL, True, base / "model" / "inference")
    assert saved.returncode == 0, saved.stderr[-2000:]
    assert (base / "model" / "inference.json").is_file()  # a PIR program
    images = write_image_folder(base / "images", classes=5, per_class=30, size=(18, 18))
    config = base / "config.yaml"
    config.write_text(yaml.safe_dump({  # no quantize section: the default, strategy search
        "model_name": MODEL, "trained_model": {"path": str(base / "model")},
        "data": {"dataset": "image_folder", "path": str(images), "num_workers": 0, "validation_fraction": 0.3,
                 "transforms": {"resize": 16, "center_crop": 16, "mean": [0.5], "std": [0.5]}},
        "evaluate": {"latency_repeats": 3, "runtimes": list(RUNTIMES)},
        # plumbing, not accuracy: a threshold short of open, so the search judges OpenVINO too
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0.01, "min_speedup": 0},
    }))
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(base / "store"), timeout=900)
    return base, result


def stage_dir(root: Path, stage: str) -> Path:
    store = ArtifactStore(root)
    return store.verify_stage(store.finalized_stage_ref(store.version(MODEL, "v1"), stage))


def manifest_metrics(root: Path, stage: str) -> dict:
    store = ArtifactStore(root)
    return store.read_manifest(store.finalized_stage_ref(store.version(MODEL, "v1"), stage))["metrics"]


def test_the_default_search_runs_a_pir_model_to_a_gate_verdict_with_candidates_from_its_onnx_graph(searched):
    base, result = searched
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    quantize = stage_dir(base / "store", "quantize")
    record = json.loads((quantize / SEARCH_FILE).read_text())
    assert record["trials_detail"] and (quantize / CALIBRATED_ONNX_FILE).is_file()
    for trial in record["trials_detail"]:
        assert trial["producer"] == "onnx-graph"
        for runtime in RUNTIMES:
            assert NOT_JUDGED not in trial["validation"][RUNTIMES_KEY][runtime], runtime
    assert "ONNX graph" in manifest_metrics(base / "store", "quantize")["calibrated_by"]
    assert "ONNX graph" in manifest_metrics(base / "store", "convert")["int8"]["calibrated_by"]  # the convert stage lowered the search's model unchanged


def weights_quantized(model: Path) -> set[str]:
    """The weights given an INT8 grid: a Q/DQ pair in the raw graph, or (a MatMul's, in paddle2onnx 1.3.1's pattern,
    which writes none) a scale in the program scales the lowering reads beside it."""
    graph = onnx.load(str(model)).graph
    weights = {init.name for init in graph.initializer}
    paired = {node.input[0] for node in graph.node if node.op_type == "QuantizeLinear" and node.input[0] in weights}
    return paired | (set(json.loads((model.parent / PROGRAM_SCALES_FILE).read_text())) & weights)


def test_a_policy_the_all_int8_model_misses_makes_the_search_drop_a_layers_qdq_pairs(searched, tmp_path):
    base, result = searched
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    first = json.loads((stage_dir(base / "store", "quantize") / SEARCH_FILE).read_text())["trials_detail"][0]
    agreement = max(first["validation"][RUNTIMES_KEY][runtime]["agreement"] for runtime in RUNTIMES)
    assert agreement < 1.0, "the near-tie classifier's INT8 agrees everywhere: no policy can force a fall-back"
    # Halfway from what the all-INT8 recipe measured to full agreement: it misses, an FP32 classifier can pass.
    policy = GatePolicy(max_accuracy_drop=100.0, min_agreement=(agreement + 1.0) / 2, min_speedup=0.0)
    config = QuantizeConfig(search={"recipes": [{}, {"bias_correction": True}], "latency_repeats": 3})
    out = tmp_path / "quantize"
    out.mkdir()
    cache = ContentCache(tmp_path / "store", "quantize-search")
    search_quantization(config, policy, EvaluateConfig(runtimes=RUNTIMES, latency_repeats=3),
                        stage_dir(base / "store", "export"), stage_dir(base / "store", "data"), out, cache)
    record = json.loads((out / SEARCH_FILE).read_text())
    # bias_correction is PaddleSlim's: skipped with the reason, not the end of the search
    assert any("bias_correction" in failed["error"] for failed in record["failed_recipes"])
    trials = record["trials_detail"]
    fallen = [trial for trial in trials if trial["phase"] == "fall-back"]
    assert fallen, record["stopped"]
    assert all(trial["producer"] == "onnx-graph" for trial in trials)
    assert record["ranking"][0]["measured_by"] == "onnx-graph"  # the ranking's scores are real calibrations
    recipe, fall_back = (cache.get(trial["calibration_digest"]) / CALIBRATED_ONNX_FILE for trial in (trials[0],
                                                                                                      fallen[0]))
    skipped = set(fallen[0]["float_layers"])
    assert skipped and skipped <= weights_quantized(recipe)  # quantized with every layer in INT8
    assert not skipped & weights_quantized(fall_back)  # their Q/DQ pairs (and scales) gone; the other layers' kept
    assert weights_quantized(fall_back) == weights_quantized(recipe) - skipped
    assert (out / CALIBRATED_ONNX_FILE).is_file() and record["kept_trial"] in [trial["index"] for trial in trials]
