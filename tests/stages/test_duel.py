"""The duel stage and the gate's comparison with the release: both models on the same unseen test samples.

The release is the session's real tiny digits model (tests/conftest.py); a candidate is a real data stage
with its predictions on its own test split (what its evaluate stage would have stored).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from quantgate.artifacts import ArtifactStore
from quantgate.config import DataConfig, GatePolicy
from quantgate.flows.duel import evidence
from quantgate.samples.sample_ids import sample_ids
from quantgate.stages.data import open_data, prepare_data
from quantgate.stages.duel import ReleaseModel, duel
from quantgate.stages.duel import outputs as out
from quantgate.stages.gate import decide, gate

POLICY = GatePolicy(min_speedup=0.0)


def release_of(stage_dirs, stored: bool = True) -> ReleaseModel:
    return ReleaseModel("v1", data_dir=stage_dirs.data, data_metrics=stage_dirs.results["data"].metrics,
                        convert_dir=stage_dirs.convert, export_dir=stage_dirs.export, quantize_dir=stage_dirs.quantize,
                        evaluate_dir=stage_dirs.evaluate if stored else None,
                        evaluation=stage_dirs.results["evaluate"].metrics)


def release_predictions(stage_dirs) -> tuple[np.ndarray, np.ndarray]:
    with np.load(stage_dirs.evaluate / "predictions.npz") as stored:
        return stored["labels"], stored["int8_pred"]


def candidate_evaluation(folder: Path, data_dir: Path, int8_pred: np.ndarray) -> dict:
    """What a candidate's evaluate stage stores for predictions `int8_pred` on its test split (FP32 alike)."""
    data = open_data(data_dir)
    labels = data.references("test")
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "predictions.npz", labels=labels, fp32_pred=int8_pred, int8_pred=int8_pred,
             sample_ids=sample_ids(data, "test"))
    top1 = 100.0 * float(np.mean(int8_pred == labels))
    return {"fp32_top1_pct": top1, "int8_top1_pct": top1, "agreement": 1.0, "speedup_int8_vs_fp32": 2.0,
            "primary_runtime": "onnxruntime", "test_samples": len(labels), "task": data.task.name,
            "runtimes": {"onnxruntime": {"predictions_file": "predictions.npz"}}}


def dueled(release: ReleaseModel, data_dir: Path, evaluate_dir: Path, evaluation: dict, out_dir: Path, cache=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    result = duel(release, data_dir, evaluate_dir, evaluation, ("onnxruntime",), out_dir, cache=cache)
    return result.metrics, evidence(release.version, result.metrics, out_dir)


def judged(policy: GatePolicy, evaluation: dict, evaluate_dir: Path, release, tmp_path: Path):
    folder = tmp_path / "gate"
    folder.mkdir(exist_ok=True)
    return gate(policy, evaluation, folder, {"onnxruntime": evaluate_dir / "predictions.npz"}, release)


def by_name(decision) -> dict:
    return {criterion.name: criterion for criterion in decision.criteria}


def subset_data(source: Path, target: Path, test_rows: np.ndarray) -> Path:
    """A copy of a digits data stage whose test split keeps only `test_rows` (an easier test split)."""
    target.mkdir(parents=True)
    shutil.copy(source / "dataset.json", target / "dataset.json")
    with np.load(source / "splits.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    for name in ("x_test", "y_test", "index_test"):
        arrays[name] = arrays[name][test_rows]
    np.savez(target / "splits.npz", **arrays)
    return target


def test_a_worse_candidate_on_an_easier_test_split_fails_against_the_release_on_the_same_images(stage_dirs,
                                                                                                  tmp_path):
    labels, released = release_predictions(stage_dirs)
    recorded = stage_dirs.results["evaluate"].metrics["int8_top1_pct"]
    easy = np.flatnonzero(released == labels)  # the candidate's test split: what the release gets right
    data = subset_data(stage_dirs.data, tmp_path / "data", easy)
    mine = labels[easy].copy()
    wrong = np.arange(0, len(easy), 60)[:max(2, round(0.015 * len(easy)))]  # ~1.5 % wrong where the release is right
    mine[wrong] = (mine[wrong] + 1) % 10
    evaluation = candidate_evaluation(tmp_path / "evaluate", data, mine)
    own = evaluation["int8_top1_pct"]
    assert own > recorded  # today's comparison: recorded release number vs this split's: a "better" candidate
    print(f"recorded release {recorded:.2f} % on its split, candidate {own:.2f} % on its easier split")

    record, release = dueled(release_of(stage_dirs), data, tmp_path / "evaluate", evaluation, tmp_path / "duel")
    assert record[out.STATUS] == out.PAIRED and record[out.PAIRED_SAMPLES] == len(easy)
    assert record[out.DROPPED_OVERLAP] == 0
    entry = record[out.RUNTIMES]["onnxruntime"]
    assert entry[out.RELEASE_INT8_TOP1] == 100.0 and entry[out.CANDIDATE_INT8_TOP1] == pytest.approx(own)
    decision = judged(POLICY, evaluation, tmp_path / "evaluate", release, tmp_path)
    regression = by_name(decision)["release_regression_pts"]
    print(regression.describe())
    assert not decision.passed and not regression.passed
    assert regression.measured == pytest.approx(100.0 - own) and regression.measured > 1
    assert regression.note.startswith(f"paired on {len(easy)} samples")
    assert decision.evidence["release_duel"]["paired_samples"] == len(easy)


def test_the_same_candidate_on_the_release_s_own_test_split_reuses_its_stored_predictions(stage_dirs, tmp_path):
    labels, released = release_predictions(stage_dirs)
    evaluation = candidate_evaluation(tmp_path / "evaluate", stage_dirs.data, released)
    record, release = dueled(release_of(stage_dirs), stage_dirs.data, tmp_path / "evaluate", evaluation,
                             tmp_path / "duel")
    entry = record[out.RUNTIMES]["onnxruntime"]
    # No second run of the release: its own stored predictions name every paired sample.
    assert entry[out.RELEASE_PREDICTIONS] == out.FROM_EVALUATION and entry[out.SCORED_SAMPLES] == 0
    assert record[out.PAIRED_SAMPLES] == len(labels) == 360 and entry[out.REGRESSION] == 0
    decision = judged(POLICY, evaluation, tmp_path / "evaluate", release, tmp_path)
    regression = by_name(decision)["release_regression_pts"]
    assert decision.passed and regression.measured == 0 and regression.note.startswith("paired on 360 samples")


def test_a_release_scored_again_predicts_what_it_stored_and_a_second_candidate_reads_the_cache(stage_dirs, tmp_path):
    labels, released = release_predictions(stage_dirs)
    evaluation = candidate_evaluation(tmp_path / "evaluate", stage_dirs.data, labels)
    cache = ArtifactStore(tmp_path / "store").cache("release-predictions")
    # An evaluation from before predictions named their samples (or a stale one) is never reused: re-scored.
    first, _ = dueled(release_of(stage_dirs, stored=False), stage_dirs.data, tmp_path / "evaluate", evaluation,
                      tmp_path / "first", cache)
    entry = first[out.RUNTIMES]["onnxruntime"]
    assert entry[out.RELEASE_PREDICTIONS] == out.SCORED and entry[out.SCORED_SAMPLES] == 360
    with np.load(tmp_path / "first" / "paired_onnxruntime.npz") as paired:
        assert np.array_equal(paired["release_pred"], released)  # its own pre-processing, the same model
    second, _ = dueled(release_of(stage_dirs, stored=False), stage_dirs.data, tmp_path / "evaluate", evaluation,
                       tmp_path / "second", cache)
    again = second[out.RUNTIMES]["onnxruntime"]
    assert again[out.RELEASE_PREDICTIONS] == out.FROM_CACHE and again[out.SCORED_SAMPLES] == 0
    assert again[out.RELEASE_INT8_TOP1] == entry[out.RELEASE_INT8_TOP1]
    print(f"scoring the release: {entry[out.SECONDS]:.3f} s; from the cache: {again[out.SECONDS]:.3f} s")


def test_a_redrawn_split_drops_the_samples_the_release_trained_on_and_too_few_left_fail_closed(stage_dirs, tmp_path):
    config = stage_dirs.config.data.model_copy(update={"seed": 3})
    (tmp_path / "data").mkdir()
    prepare_data(config, tmp_path / "data")
    redrawn = open_data(tmp_path / "data")
    evaluation = candidate_evaluation(tmp_path / "evaluate", tmp_path / "data", redrawn.references("test"))
    record, release = dueled(release_of(stage_dirs), tmp_path / "data", tmp_path / "evaluate", evaluation,
                             tmp_path / "duel")
    dropped, paired = record[out.DROPPED_OVERLAP], record[out.PAIRED_SAMPLES]
    print(f"re-drawn split: {dropped} of 360 test samples dropped (seen by the release), {paired} paired")
    assert dropped == record[out.DROPPED_SEEN_BY_RELEASE] > 200 and dropped + paired == 360
    assert record[out.RUNTIMES]["onnxruntime"][out.RELEASE_PREDICTIONS] == out.FROM_EVALUATION  # all in its test
    regression = by_name(judged(POLICY, evaluation, tmp_path / "evaluate", release, tmp_path))[
        "release_regression_pts"]
    assert not regression.passed and regression.measured is None
    assert f"paired on {paired} samples" in regression.note and "gate.min_paired_samples=100" in regression.note
    enough = GatePolicy(min_speedup=0.0, min_paired_samples=min(paired, 50))
    assert by_name(judged(enough, evaluation, tmp_path / "evaluate", release, tmp_path))[
        "release_regression_pts"].measured is not None


def write_digit_folder(root: Path, rows: np.ndarray, names: list[str]) -> Path:
    """scikit-learn's digits `rows` as 16x16 PNG files, one folder per class name (names[digit])."""
    digits = load_digits()
    for row in rows:
        folder = root / names[digits.target[row]]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (digits.images[row] / 16.0 * 255).astype(np.uint8)
        Image.fromarray(pixels, "L").resize((16, 16), Image.NEAREST).save(folder / f"digit_{row}.png")
    return root


def folder_data(tmp_path: Path, names: list[str]) -> Path:
    images = write_digit_folder(tmp_path / "images", np.arange(0, 1797, 3), names)
    config = DataConfig(dataset="image_folder", path=str(images), test_fraction=0.25,
                        transforms={"resize": 16, "color": "grayscale", "mean": [0.5], "std": [0.25]})
    (tmp_path / "data").mkdir()
    prepare_data(config, tmp_path / "data")
    return tmp_path / "data"


def test_a_release_with_another_pre_processing_is_scored_with_its_own_from_the_raw_files(stage_dirs, tmp_path):
    data = folder_data(tmp_path, [str(k) for k in range(10)])  # 16x16, normalized: the release reads 8x8 in [0, 1]
    assert open_data(data).input_shape == (1, 16, 16)
    labels = open_data(data).references("test")
    evaluation = candidate_evaluation(tmp_path / "evaluate", data, labels)
    record, release = dueled(release_of(stage_dirs), data, tmp_path / "evaluate", evaluation, tmp_path / "duel")
    entry = record[out.RUNTIMES]["onnxruntime"]
    print(f"release on the 16x16 files, read at its own 8x8: {entry[out.RELEASE_INT8_TOP1]:.2f} %")
    assert record[out.STATUS] == out.PAIRED and entry[out.RELEASE_PREDICTIONS] == out.SCORED
    assert entry[out.SCORED_SAMPLES] == len(labels) >= 100
    assert entry[out.RELEASE_INT8_TOP1] > 80  # its own resize to 8x8 and [0, 1] levels: it sees its digits


def test_a_changed_class_set_fails_closed_naming_the_classes_unless_skipped_with_a_note(stage_dirs, tmp_path):
    data = folder_data(tmp_path, [*(str(k) for k in range(9)), "nine"])
    evaluation = candidate_evaluation(tmp_path / "evaluate", data, open_data(data).references("test"))
    record, release = dueled(release_of(stage_dirs), data, tmp_path / "evaluate", evaluation, tmp_path / "duel")
    assert record[out.STATUS] == out.INCOMPARABLE and record[out.CLASSES] == {"added": ["nine"], "removed": ["9"]}
    failed = by_name(judged(POLICY, evaluation, tmp_path / "evaluate", release, tmp_path))["release_regression_pts"]
    assert not failed.passed and "the class set changed: added ['nine'], removed ['9']" in failed.note
    skip = GatePolicy(min_speedup=0.0, incomparable_release="skip_with_note")
    skipped = by_name(judged(skip, evaluation, tmp_path / "evaluate", release, tmp_path))["release_regression_pts"]
    assert skipped.passed and skipped.verdict == "not_applicable" and "skip_with_note" in skipped.note


def test_a_release_whose_model_cannot_be_read_fails_closed_with_the_reason():
    unusable = ReleaseModel("v7", problem="its convert stage is unusable: int8.onnx does not match its manifest")
    decision = decide(POLICY, {"fp32_top1_pct": 97.0, "int8_top1_pct": 97.0, "agreement": 1.0,
                               "speedup_int8_vs_fp32": 2.0}, release=evidence("v7", {
                                   out.STATUS: out.INCOMPARABLE, out.PROBLEM: unusable.problem}, Path(".")))
    regression = by_name(decision)["release_regression_pts"]
    assert not decision.passed and regression.measured is None
    assert regression.note == ("release v7 cannot be scored on this version's test samples: its convert stage is "
                               "unusable: int8.onnx does not match its manifest")


def test_text_recognition_is_judged_on_the_character_error_rate_against_the_release(tmp_path):
    config = DataConfig(dataset="digit_strings", digit_strings={"lines": 500}, test_fraction=0.4)
    (tmp_path / "data").mkdir()
    prepare_data(config, tmp_path / "data")
    data = open_data(tmp_path / "data")
    references = data.references("test")
    # The release reads every line right; this version drops the last digit of one line in ten.
    release_dir = tmp_path / "release-evaluate"
    release_eval = candidate_evaluation(release_dir, tmp_path / "data", references)
    mine = np.asarray([line[:-1] if k % 10 == 0 else line for k, line in enumerate(references)], dtype=str)
    evaluation = candidate_evaluation(tmp_path / "evaluate", tmp_path / "data", mine)
    evaluation.update({"fp32_cer_pct": 0.0, "int8_cer_pct": 0.0, "cer_increase_pts": 0.0})
    release = ReleaseModel("v1", data_dir=tmp_path / "data", evaluate_dir=release_dir, evaluation=release_eval)
    record, duel_evidence = dueled(release, tmp_path / "data", tmp_path / "evaluate", evaluation, tmp_path / "duel")
    entry = record[out.RUNTIMES]["onnxruntime"]
    assert entry[out.RELEASE_INT8_CER] == 0 and entry[out.CER_INCREASE] > 0.5
    decision = decide(GatePolicy(min_speedup=0.0, max_release_regression=20.0), evaluation,
                      release=duel_evidence)
    cer = by_name(decision)["release_cer_increase_pts"]
    print(cer.describe())
    assert not cer.passed and cer.measured == pytest.approx(entry[out.CER_INCREASE])
    assert by_name(decision)["release_regression_pts"].passed  # 10 pts of line accuracy, within 20
    assert json.dumps(decision.as_dict(), allow_nan=False)
