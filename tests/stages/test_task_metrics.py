"""Text recognition's decoding and metrics, and the evaluate stage, the search's check and the gate speaking them.

Fast: hand-made score sequences, metrics dicts built by hand, and for the evaluate stage a tiny ONNX
recognizer built with onnx.helper over a data folder in the data stage's arrays format (no training).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from quantgate.config import EvaluateConfig, GatePolicy
from quantgate.policy.decision import decide, paired_bootstrap_delta
from quantgate.samples.reading import open_data
from quantgate.stages.evaluate.accuracy import evaluate
from quantgate.stages.evaluate.outputs import CHARACTER_ERRORS_FILE, PREDICTIONS_FILE
from quantgate.stages.gate.decision import gate
from quantgate.stages.quantize.validation_check import ValidationCheck, policy_failures
from quantgate.tasks.text import TextRecognition, character_error_rate_pct, character_errors, greedy_decode

DIGITS = tuple("0123456789")
TEXT = TextRecognition(DIGITS)
HEIGHT = len(DIGITS) + 1  # one image row per output class, blank included: the toy model reads the path off them
STEPS = 12  # image width = time steps


def scores_of(path: list[int], classes: int = HEIGHT) -> np.ndarray:
    """[T, C] scores whose best path is `path`."""
    scores = np.zeros((len(path), classes), np.float32)
    scores[np.arange(len(path)), path] = 1.0
    return scores


def path_of(line: str) -> list[int]:
    """A CTC path for `line`: each character held two steps, a blank between equal neighbours, blanks after."""
    path = []
    for index, character in enumerate(line):
        if index and line[index - 1] == character:
            path.append(0)
        path += [DIGITS.index(character) + 1] * 2
    assert len(path) <= STEPS
    return path + [0] * (STEPS - len(path))


def test_greedy_decoding_merges_repeats_and_drops_blanks():
    paths = [[1, 1, 0, 1, 2, 2, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [3, 3, 3, 3, 3, 3, 3, 3], [4, 0, 4, 4, 0, 0, 4, 5]]
    decoded = greedy_decode(np.stack([scores_of(path) for path in paths]), DIGITS)
    assert decoded.dtype.kind == "U" and decoded.tolist() == ["001", "", "2", "3334"]
    assert TEXT.predict(np.stack([scores_of(path_of(line)) for line in ("1223", "7")])).tolist() == ["1223", "7"]


def test_the_character_error_rate_is_edit_distance_over_the_reference_length():
    assert character_error_rate_pct(np.array(["12345"]), np.array(["1245"])) == pytest.approx(20.0)
    # summed over lines: 1 deletion + 2 substitutions over 5 + 5 reference characters
    assert character_error_rate_pct(np.array(["12345", "67890"]), np.array(["1245", "67811"])) == pytest.approx(30.0)
    assert character_error_rate_pct(np.array(["12"]), np.array(["12"])) == 0.0
    errors = character_errors(np.array(["12345", "1"]), np.array(["1245", "7"]))
    assert errors["1"] == {"count": 2, "errors": 1} and errors["3"] == {"count": 1, "errors": 1}
    assert errors["5"] == {"count": 1, "errors": 0}


def test_line_accuracy_cer_and_agreement_compare_strings():
    references = np.array(["123", "456", "789", "000"])
    fp32, int8 = np.array(["123", "456", "780", "000"]), np.array(["123", "45", "780", "001"])
    numbers = TEXT.compare(references, fp32, int8)
    assert numbers["fp32_top1_pct"] == 75.0 and numbers["int8_top1_pct"] == 25.0
    assert numbers["accuracy_delta_pts"] == -50.0 and numbers["agreement"] == 0.5
    assert numbers["fp32_cer_pct"] == pytest.approx(100 / 12) and numbers["int8_cer_pct"] == pytest.approx(300 / 12)
    assert numbers["cer_increase_pts"] == pytest.approx(200 / 12)


# -- the gate ----------------------------------------------------------------------------------------------

TEXT_METRICS = {"task": "text_recognition", "fp32_top1_pct": 96.0, "int8_top1_pct": 95.5, "agreement": 0.99,
                "speedup_int8_vs_fp32": 1.6, "fp32_cer_pct": 1.0, "int8_cer_pct": 1.8, "cer_increase_pts": 0.8}


def by_name(decision) -> dict:
    return {criterion.name: criterion for criterion in decision.criteria}


def test_the_gate_fails_a_text_model_on_a_cer_policy_it_cannot_meet():
    strict = decide(GatePolicy(max_cer_increase_pts=0.5), TEXT_METRICS)
    assert not strict.passed and [criterion.name for criterion in strict.failed] == ["cer_increase_pts"]
    assert strict.failed[0].describe() == ("cer_increase_pts = 0.8 pts (must be <= 0.5) FAILED: character error "
                                           "rate 1 % FP32 / 1.8 % INT8")
    assert decide(GatePolicy(max_cer_increase_pts=1.0), TEXT_METRICS).passed
    # line accuracy is judged under the accuracy keys, as top-1 is
    assert by_name(strict)["accuracy_drop_pts"].measured == pytest.approx(0.5)


def test_a_text_evaluation_without_its_cer_fails_closed_and_classification_has_no_cer_criterion():
    missing = decide(GatePolicy(max_cer_increase_pts=100), {k: v for k, v in TEXT_METRICS.items()
                                                             if k != "cer_increase_pts"})
    assert not missing.passed and by_name(missing)["cer_increase_pts"].measured is None
    classification = {k: v for k, v in TEXT_METRICS.items() if "cer" not in k and k != "task"}
    assert "cer_increase_pts" not in by_name(decide(GatePolicy(), classification))
    assert decide(GatePolicy(), {**classification, "task": "classification"}).passed
    # CER numbers under a classification record, or a task the gate does not know, are not judged as top-1 alone
    for broken in ({**TEXT_METRICS, "task": "classification"}, {**TEXT_METRICS, "task": "speech"}):
        stale = by_name(decide(GatePolicy(max_cer_increase_pts=100), broken))["stale_evidence"]
        assert not stale.passed


def test_every_runtime_is_judged_on_its_own_cer():
    openvino = {**TEXT_METRICS, "cer_increase_pts": 2.0, "int8_cer_pct": 3.0, "predictions_file": "p.npz"}
    metrics = {**TEXT_METRICS, "primary_runtime": "onnxruntime",
               "runtimes": {"onnxruntime": dict(TEXT_METRICS), "openvino": openvino}}
    decision = decide(GatePolicy(max_cer_increase_pts=1.0), metrics, runtimes=("onnxruntime", "openvino"))
    assert [criterion.name for criterion in decision.failed] == ["openvino.cer_increase_pts"]
    assert decision.runtimes["openvino"]["failed"] == ["openvino.cer_increase_pts"]
    assert decision.runtimes["onnxruntime"]["passed"] is True


def text_predictions(count: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    references = np.array(["".join(rng.choice(list(DIGITS), 5)) for _ in range(count)])
    fp32 = np.array([line if rng.random() > 0.05 else line[:-1] for line in references])
    int8 = np.array([line if rng.random() > 0.05 else line[1:] + "7" for line in fp32])
    return references, fp32, int8


def test_the_bootstrap_runs_on_line_correctness():
    references, fp32, int8 = text_predictions()
    interval = paired_bootstrap_delta(references, fp32, int8, resamples=1000, seed=0)
    point = 100 * (np.mean(int8 == references) - np.mean(fp32 == references))
    assert interval.delta_pts == pytest.approx(point) and interval.low_pts <= point <= interval.high_pts
    assert paired_bootstrap_delta(references, fp32, fp32, resamples=200, seed=0).high_pts == 0.0


def test_the_gate_reads_stored_text_predictions_and_checks_their_cer(tmp_path):
    references, fp32, int8 = text_predictions()
    path = tmp_path / "predictions.npz"
    np.savez(path, labels=references, fp32_pred=fp32, int8_pred=int8)
    metrics = {**TEXT.compare(references, fp32, int8), "task": "text_recognition", "speedup_int8_vs_fp32": 1.5}
    loose = GatePolicy(max_accuracy_drop=100, min_agreement=0, max_cer_increase_pts=100)
    decision = gate(loose, metrics, tmp_path, path)
    assert decision.passed and decision.evidence["delta_interval"]["samples"] == 200
    record = json.loads((tmp_path / "gate.json").read_text())
    assert "cer_increase_pts" in [criterion["name"] for criterion in record["criteria"]]

    edited = gate(loose, {**metrics, "int8_cer_pct": metrics["int8_cer_pct"] - 1}, tmp_path, path)
    assert not edited.passed and "int8_cer_pct" in by_name(edited)["stale_evidence"].note
    np.savez(path, labels=np.arange(200), fp32_pred=np.arange(200), int8_pred=np.arange(200))
    classes = gate(loose, metrics, tmp_path, path)
    assert not classes.passed and "not text lines" in by_name(classes)["stale_evidence"].note


# -- the evaluate stage and the search's check on a toy recognizer ------------------------------------------

def toy_recognizer(path, weight: np.ndarray) -> None:
    """[N, 1, HEIGHT, STEPS] images -> [N, STEPS, classes] logits: each image column times `weight`."""
    graph = helper.make_graph(
        [helper.make_node("Squeeze", ["image", "axis"], ["rows"]),
         helper.make_node("Transpose", ["rows"], ["columns"], perm=[0, 2, 1]),
         helper.make_node("MatMul", ["columns", "weight"], ["logits"])],
        "toy_recognizer",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, HEIGHT, STEPS])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", STEPS, weight.shape[1]])],
        [numpy_helper.from_array(np.asarray([1], np.int64), "axis"),
         numpy_helper.from_array(weight.astype(np.float32), "weight")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def text_data_folder(folder, lines: dict[str, list[str]]):
    """A data stage's output for digit strings in the arrays format: images that spell each line's CTC path."""
    folder.mkdir()
    length = max(len(line) for split in lines.values() for line in split)
    arrays = {}
    for split, split_lines in lines.items():
        arrays[f"x_{split}"] = np.stack([scores_of(path_of(line)).T[None] for line in split_lines]).astype(np.float32)
        arrays[f"y_{split}"] = np.stack([np.pad([DIGITS.index(c) + 1 for c in line], (0, length - len(line)))
                                         for line in split_lines]).astype(np.int64)
        arrays[f"text_{split}"] = np.asarray(split_lines, dtype=str)
        arrays[f"index_{split}"] = np.arange(len(split_lines))
    np.savez(folder / "splits.npz", **arrays)
    (folder / "dataset.json").write_text(json.dumps({
        "task": "text_recognition", "kind": "arrays", "dataset": "digit_strings", "characters": list(DIGITS),
        "num_classes": HEIGHT, "max_text_length": length, "input_shape": [1, HEIGHT, STEPS], "seed": 0,
        "transforms": {"rec_image_shape": [1, HEIGHT, STEPS], "color": "grayscale"}}))
    return folder


LINES = {"train": ["12"], "calibration": ["34"], "validation": ["1234", "5567", "3", "90"],
         "test": ["1234", "5567", "3", "90", "3434", "12", "44", "7"]}


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory):
    """The data folder, an FP32 recognizer that reads every line right, and an INT8 one (onnxruntime's dynamic
    quantization) of a recognizer that reads every 3 as a 4 (so "34" becomes one held "4")."""
    root = tmp_path_factory.mktemp("text")
    data = text_data_folder(root / "data", LINES)
    identity = np.eye(HEIGHT, dtype=np.float32)
    toy_recognizer(root / "fp32.onnx", identity)
    misreads = identity.copy()
    misreads[4, 4], misreads[4, 5] = 0.0, 1.0  # the row spelling "3" (id 4) scores as "4" (id 5)
    toy_recognizer(root / "float_misreads.onnx", misreads)
    quantize_dynamic(str(root / "float_misreads.onnx"), str(root / "int8.onnx"), weight_type=QuantType.QInt8)
    return root, data


def test_evaluate_decodes_text_lines_and_reports_line_accuracy_and_cer(recognizer, tmp_path):
    root, data = recognizer
    config = EvaluateConfig(runtimes=("onnxruntime",), batch_size=3, threads=1, latency_repeats=3)
    metrics = evaluate(config, root / "fp32.onnx", root / "int8.onnx", data, tmp_path).metrics
    with np.load(tmp_path / PREDICTIONS_FILE, allow_pickle=False) as stored:
        labels, fp32, int8 = stored["labels"], stored["fp32_pred"], stored["int8_pred"]
        # a line's [steps, characters] outputs are compared batch by batch and dropped, not stored
        assert stored["int8_logits"].shape == stored["fp32_logits"].shape == (0,)
    images = open_data(data).array("test")[0]
    outputs = [ort.InferenceSession(str(root / name)).run(None, {"image": images})[0] for name in ("fp32.onnx", "int8.onnx")]
    assert metrics["max_abs_logit_diff"] == pytest.approx(float(np.abs(outputs[0] - outputs[1]).max()), rel=1e-6)
    assert metrics["max_abs_logit_diff"] > 0.5  # the misread row: over the three batches of 3, 3 and 2 lines
    assert labels.tolist() == LINES["test"] and fp32.tolist() == LINES["test"]
    assert int8.tolist() == ["124", "5567", "4", "90", "4", "12", "44", "7"]
    assert metrics["task"] == "text_recognition" and metrics["accuracy_metric"] == "line accuracy"
    assert metrics["fp32_top1_pct"] == 100.0 and metrics["int8_top1_pct"] == 62.5 and metrics["agreement"] == 0.625
    assert metrics["fp32_cer_pct"] == 0.0 and metrics["int8_cer_pct"] == pytest.approx(100 * 5 / 20)
    assert metrics["cer_increase_pts"] == metrics["runtimes"]["onnxruntime"]["cer_increase_pts"]
    assert "per_class_top1_pct_fp32" not in metrics
    errors = json.loads((tmp_path / CHARACTER_ERRORS_FILE).read_text(encoding="utf-8"))
    assert errors["runtime"] == "onnxruntime" and errors["int8"]["3"]["count"] == 4
    assert errors["int8"]["3"]["errors"] >= 3 and all(entry["errors"] == 0 for entry in errors["fp32"].values())
    # what the gate makes of it: within the line accuracy policy, not within the CER one
    (tmp_path / "gate").mkdir()
    gated = gate(GatePolicy(max_accuracy_drop=50, min_agreement=0, min_speedup=0), metrics, tmp_path / "gate",
                 tmp_path / PREDICTIONS_FILE)
    assert [criterion.name for criterion in gated.failed] == ["cer_increase_pts"]


def test_the_search_check_scores_text_on_the_validation_split(recognizer):
    root, data = recognizer
    check = ValidationCheck(root / "fp32.onnx", open_data(data), threads=1, batch_size=3)
    score = check.score(root / "int8.onnx")
    assert score["task"] == "text_recognition" and score["validation_samples"] == 4
    assert score["fp32_top1_pct"] == 100.0 and score["int8_top1_pct"] == 50.0 and score["agreement"] == 0.5
    assert score["int8_cer_pct"] == pytest.approx(100 * 2 / 11) and score["cer_increase_pts"] > 0
    assert score["logit_error"] > 0 and check.score(root / "fp32.onnx")["logit_error"] == 0.0
    failures = policy_failures(GatePolicy(max_accuracy_drop=60, min_agreement=0, min_speedup=0),
                               {**score, "speedup_int8_vs_fp32": 1.0})
    assert len(failures) == 1 and failures[0].startswith("cer_increase_pts = ")


# -- a text recognizer's bundle ----------------------------------------------------------------------------

def text_bundle(folder, models) -> None:
    """A bundle folder as `quantgate bundle` writes one for a text recognizer: models, characters.txt, the data
    stage's preprocessing record and a sealed manifest (written by hand: no store or training needed)."""
    from quantgate.bundle.manifest import sealed_json, sha256_file
    from quantgate.config import TransformsConfig
    from quantgate.samples.text_reading import text_preprocessing_record

    transforms = TransformsConfig(rec_image_shape=(1, HEIGHT, STEPS), color="grayscale")
    (folder / "onnxruntime").mkdir(parents=True)
    for precision, model in models.items():
        (folder / "onnxruntime" / f"{precision}.onnx").write_bytes(model.read_bytes())
    (folder / "characters.txt").write_text("".join(f"{character}\n" for character in DIGITS), encoding="utf-8")
    (folder / "preprocessing.json").write_text(json.dumps(text_preprocessing_record(transforms, "the background")))
    files = {path: dict(zip(("sha256", "bytes"), sha256_file(folder / path)))
             for path in ("onnxruntime/fp32.onnx", "onnxruntime/int8.onnx", "characters.txt", "preprocessing.json")}
    (folder / "bundle.json").write_bytes(sealed_json({
        "format": "quantgate-bundle", "format_version": 2, "model": "lines", "version": "v1",
        "task": "text_recognition", "characters": "characters.txt", "preprocessing": "preprocessing.json",
        "runtimes": {"onnxruntime": {precision: [f"onnxruntime/{precision}.onnx"] for precision in models}},
        "default_runtime": "onnxruntime", "evaluated_with": {"batch_size": 2, "threads": 1}, "files": files}))


def test_predict_prints_the_decoded_line_of_each_image_of_a_text_bundle(recognizer, tmp_path, capsys):
    from PIL import Image

    from quantgate.cli import main

    root, _ = recognizer
    text_bundle(tmp_path / "bundle", {"fp32": root / "fp32.onnx", "int8": root / "int8.onnx"})
    images = []
    for line in ("1234", "90", "7"):  # one white pixel per column, in the row of its path's class
        images.append(tmp_path / f"{line}.png")
        Image.fromarray((scores_of(path_of(line)).T * 255).astype(np.uint8), "L").save(images[-1])
    assert main(["predict", str(tmp_path / "bundle"), *map(str, images), "--precision", "fp32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("bundle lines/v1: 4 files verified; onnxruntime FP32 model")
    assert lines[1] == "runtime onnxruntime: the bundle's default runtime (its gate record names no runtime to rank)"
    assert lines[2:] == [f"{image}: {line}" for image, line in zip(images, ("1234", "90", "7"))]
    assert main(["predict", str(tmp_path / "bundle"), *map(str, images), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [p["text"] for p in printed["predictions"]] == ["124", "90", "7"]  # the INT8 model misreads 3 as 4


def test_a_text_model_card_says_task_line_accuracy_and_cer():
    from quantgate.bundle.model_card import render_markdown

    numbers = {"fp32_top1_pct": 96.0, "int8_top1_pct": 95.5, "accuracy_delta_pts": -0.5, "fp32_cer_pct": 1.0,
               "int8_cer_pct": 1.25, "cer_increase_pts": 0.25, "agreement": 0.99, "library": "onnxruntime 1.23"}
    card = {"created_at": "2025-01-01T00:00:00+00:00",
            "model": {"name": "lines", "version": "v1", "architecture": "crnn", "task": "text_recognition",
                      "characters": list(DIGITS), "input_shape": [1, 32, 320]},
            "data": {"dataset": "digit_strings", "fingerprint_sha256": "f", "samples": {"test": 8},
                     "preprocessing": {"steps": ["pad on the right"]}},
            "training": {}, "quantization": {},
            "evaluation": {"primary_runtime": "onnxruntime", "test_samples": 8, "accuracy_metric": "line accuracy",
                           "runtimes": {"onnxruntime": numbers}},
            "gate": {"verdict": "passed", "criteria": []}, "sizes_bytes": {},
            "lineage": {"store": "s", "model": "lines", "version": "v1", "version_record_sha256": "r", "stages": {},
                        "sources": {}}}
    markdown = render_markdown(card)
    assert "crnn recognizing text lines (CTC, greedy decoding) over a dictionary of 10 characters (0123456789); " \
           "INT8 line accuracy 95.5 %, character error rate 1.25 %" in markdown
    assert "| runtime | FP32 line accuracy % | INT8 line accuracy % | delta pts | FP32 CER % | INT8 CER % | " \
           "CER increase pts |" in markdown
