"""The gate judges every listed runtime by the same policy; the version passes only if every one does."""

import json
from pathlib import Path

import numpy as np
import pytest

from quantgate.artifacts import ArtifactStore
from quantgate.config import GatePolicy, validate_config
from quantgate.flows.duel import evidence
from quantgate.flows.evidence import gate_evidence
from quantgate.policy.decision import Criterion, decide
from quantgate.policy.runtimes import runtime_headlines, with_criterion, with_verdicts
from quantgate.stages.duel import outputs as duel
from quantgate.stages.evaluate.outputs import HEADLINE_METRICS
from quantgate.stages.gate.decision import gate

PER_RUNTIME = ("accuracy_drop_pts", "agreement", "int8_top1_pct", "delta_ci95_low_pts", "speedup",
               "release_regression_pts")
ORT = {"fp32_top1_pct": 97.5, "int8_top1_pct": 97.0, "accuracy_delta_pts": -0.5, "agreement": 0.99,
       "latency_ms_p50_fp32": 2.0, "latency_ms_p50_int8": 1.0, "speedup_int8_vs_fp32": 2.0,
       "model_bytes_fp32": 4000, "model_bytes_int8": 1000}
OPENVINO = {**ORT, "int8_top1_pct": 97.2, "accuracy_delta_pts": -0.3, "speedup_int8_vs_fp32": 2.5,
            "library": "openvino 2025.1", "fp32_model": "fp32.onnx", "int8_model": "int8_paddle2onnx.onnx",
            "int8_ops": {"int8": 4, "total_conv_matmul": 4}, "predictions_file": "predictions_openvino.npz"}
PADDLE_TOO_LOSSY = {**ORT, "int8_top1_pct": 94.0, "accuracy_delta_pts": -3.5, "agreement": 0.95,
                    "library": "paddle_inference 3.0.0", "int8_model": "PaddleSlim program",
                    "predictions_file": "predictions_paddle_inference.npz"}


def evaluation(**runtimes) -> dict:
    """Evaluation metrics as the evaluate stage writes them: top level = onnxruntime, then every runtime."""
    return {**ORT, "primary_runtime": "onnxruntime",
            "runtimes": {"onnxruntime": {**ORT, "predictions_file": "predictions.npz"}, **runtimes}}


def by_name(decision) -> dict:
    return {criterion.name: criterion for criterion in decision.criteria}


def test_one_runtime_failing_fails_the_version_while_the_others_pass():
    metrics = evaluation(openvino=OPENVINO, paddle_inference=PADDLE_TOO_LOSSY)
    decision = decide(GatePolicy(max_accuracy_drop=1.0, min_agreement=0.98), metrics,
                      runtimes=("onnxruntime", "openvino", "paddle_inference"))
    assert not decision.passed
    assert [c.name for c in decision.failed] == ["paddle_inference.accuracy_drop_pts", "paddle_inference.agreement"]
    assert decision.failed[0].describe() == ("paddle_inference.accuracy_drop_pts = 3.5 pts (must be <= 1) FAILED: "
                                             "paddle_inference 3.0.0: PaddleSlim program vs FP32")
    assert decision.runtimes["onnxruntime"]["passed"] and decision.runtimes["openvino"]["passed"]
    assert decision.runtimes["paddle_inference"] == {
        "passed": False, "failed": ["paddle_inference.accuracy_drop_pts", "paddle_inference.agreement"],
        "delta_interval": None}
    # The primary runtime keeps today's names; the others are judged by the same rules, prefixed.
    names = [c.name for c in decision.criteria]
    assert names[:7] == ["accuracy_drop_pts", "agreement", "int8_top1_pct", "delta_ci95_low_pts",
                         "release_regression_pts", "stale_evidence", "speedup"]
    assert names[7:] == [f"{runtime}.{name}" for runtime in ("openvino", "paddle_inference") for name in PER_RUNTIME]
    assert by_name(decision)["openvino.speedup"].measured == 2.5

    without_paddle = decide(GatePolicy(), metrics, runtimes=("onnxruntime", "openvino"))
    assert without_paddle.passed and set(without_paddle.runtimes) == {"onnxruntime", "openvino"}


def test_a_listed_runtime_without_metrics_fails_closed():
    decision = decide(GatePolicy(), evaluation(), runtimes=("onnxruntime", "openvino"))
    assert not decision.passed
    failed = list(decision.failed)
    assert [c.name for c in failed] == ["openvino.accuracy_drop_pts", "openvino.agreement", "openvino.int8_top1_pct",
                                        "openvino.speedup"]
    assert all(c.measured is None and "no metrics for openvino" in c.note for c in failed)
    # The interval is informational by default; required, it fails too, for the same reason.
    required = decide(GatePolicy(require_ci_within_drop=True), evaluation(), runtimes=("onnxruntime", "openvino"))
    assert "no metrics for openvino" in by_name(required)["openvino.delta_ci95_low_pts"].note
    assert not by_name(required)["openvino.delta_ci95_low_pts"].passed


def paired_duel(folder: Path, version: str, accuracy: dict[str, tuple[int, int]], samples: int = 200):
    """A duel record with one paired file per runtime: {runtime: (release right, this version right)}."""
    folder.mkdir(parents=True, exist_ok=True)
    runtimes = {}
    for runtime, (release_right, candidate_right) in accuracy.items():
        release_pred, candidate_pred = np.ones(samples, np.int64), np.ones(samples, np.int64)
        release_pred[:release_right], candidate_pred[:candidate_right] = 0, 0
        np.savez(folder / f"paired_{runtime}.npz", rows=np.arange(samples), sample_ids=np.arange(samples).astype(str),
                 references=np.zeros(samples, np.int64), release_pred=release_pred, candidate_pred=candidate_pred)
        runtimes[runtime] = {duel.PAIRED_FILE: f"paired_{runtime}.npz",
                             duel.RELEASE_INT8_TOP1: 100 * release_right / samples,
                             duel.CANDIDATE_INT8_TOP1: 100 * candidate_right / samples,
                             duel.REGRESSION: 100 * (release_right - candidate_right) / samples}
    return evidence(version, {duel.STATUS: duel.PAIRED, duel.PAIRED_SAMPLES: samples, duel.TEST_SAMPLES: samples,
                              duel.RUNTIMES: runtimes}, folder)


def test_every_runtime_is_compared_with_the_release_on_the_same_samples(tmp_path):
    metrics = evaluation(openvino={**OPENVINO, "int8_top1_pct": 90.0})
    release = paired_duel(tmp_path, "v4", {"onnxruntime": (196, 195), "openvino": (196, 190)})
    decision = decide(GatePolicy(min_agreement=0, max_accuracy_drop=100), metrics, release=release,
                      runtimes=("onnxruntime", "openvino"))
    regression = [c for c in decision.criteria if c.name.endswith("release_regression_pts")]
    assert [c.name for c in regression] == ["release_regression_pts", "openvino.release_regression_pts"]
    assert regression[0].measured == pytest.approx(0.5) and regression[0].passed
    assert regression[1].measured == pytest.approx(3.0) and not regression[1].passed
    assert regression[0].note.startswith("paired on 200 samples") and "vs release v4" in regression[0].note
    assert decision.runtimes["openvino"]["failed"] == ["openvino.release_regression_pts"]


def test_a_runtime_the_duel_did_not_score_fails_closed(tmp_path):
    metrics = {**OPENVINO, "primary_runtime": "openvino", "runtimes": {"openvino": OPENVINO,
                                                                       "paddle_inference": OPENVINO}}
    release = paired_duel(tmp_path, "v4", {"openvino": (196, 196)})
    decision = decide(GatePolicy(), metrics, release=release, runtimes=("openvino", "paddle_inference"))
    assert [c.name for c in decision.failed] == ["paddle_inference.release_regression_pts"]
    assert "has no readable paddle_inference scores" in decision.failed[0].note
    assert decision.evidence["primary_runtime"] == "openvino"


def test_top_level_metrics_of_another_runtime_are_stale():
    metrics = {**evaluation(openvino=OPENVINO), "primary_runtime": "openvino"}
    stale = by_name(decide(GatePolicy(), metrics, runtimes=("onnxruntime", "openvino")))["stale_evidence"]
    assert not stale.passed and "top-level metrics are openvino's" in stale.note
    differing = evaluation()
    differing["runtimes"]["onnxruntime"]["int8_top1_pct"] = 96.0
    stale = by_name(decide(GatePolicy(), differing))["stale_evidence"]
    assert not stale.passed and "int8_top1_pct 97.0 differs from onnxruntime's own entry (96.0)" in stale.note


def save(folder, name, labels, fp32, int8):
    np.savez(folder / name, labels=labels, fp32_pred=fp32, int8_pred=int8, fp32_logits=np.zeros((len(labels), 10)),
             int8_logits=np.zeros((len(labels), 10)))
    return folder / name


def measured(labels, fp32, int8, **extra) -> dict:
    return {**ORT, "fp32_top1_pct": 100 * float(np.mean(fp32 == labels)),
            "int8_top1_pct": 100 * float(np.mean(int8 == labels)), "agreement": float(np.mean(fp32 == int8)), **extra}


def test_each_runtime_is_bootstrapped_from_its_own_predictions(tmp_path):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 10, 150)
    fp32 = np.where(rng.random(150) < 0.05, (labels + 1) % 10, labels)
    same = fp32.copy()  # onnxruntime: INT8 predicts exactly what FP32 does
    shaky = np.where(rng.random(150) < 0.08, (labels + 2) % 10, fp32)  # openvino: disagrees on ~8 %
    ort, ov = measured(labels, fp32, same), measured(labels, fp32, shaky, predictions_file="predictions_openvino.npz")
    metrics = {**ort, "primary_runtime": "onnxruntime", "runtimes": {"onnxruntime": ort, "openvino": ov}}
    files = {"onnxruntime": save(tmp_path, "predictions.npz", labels, fp32, same),
             "openvino": save(tmp_path, "predictions_openvino.npz", labels, fp32, shaky)}
    drop = ov["fp32_top1_pct"] - ov["int8_top1_pct"]
    policy = GatePolicy(max_accuracy_drop=drop + 0.01, min_agreement=0, require_ci_within_drop=True)
    decision = gate(policy, metrics, tmp_path, files)
    assert [c.name for c in decision.failed] == ["openvino.delta_ci95_low_pts"]  # its point estimate is within
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["runtimes"]["onnxruntime"]["delta_interval"]["high_pts"] == 0.0
    assert record["runtimes"]["openvino"]["delta_interval"]["low_pts"] < -drop
    assert record["runtimes"]["openvino"]["failed"] == ["openvino.delta_ci95_low_pts"] and not record["passed"]

    forged = {**metrics, "runtimes": {**metrics["runtimes"], "openvino": {**ov, "int8_top1_pct": 99.9}}}
    stale = by_name(gate(policy, forged, tmp_path, files))["stale_evidence"]
    assert "openvino: int8_top1_pct 99.9000 does not match the stored predictions" in stale.note


def test_with_only_onnxruntime_the_record_is_todays_plus_its_verdict(tmp_path):
    decision = gate(GatePolicy(), ORT, tmp_path)
    record = json.loads((tmp_path / "gate.json").read_text())
    assert {c["name"] for c in record["criteria"]} == {
        "accuracy_drop_pts", "agreement", "int8_top1_pct", "delta_ci95_low_pts", "release_regression_pts",
        "stale_evidence", "speedup"}
    assert record["primary_runtime"] == "onnxruntime" and decision.passed
    assert record["runtimes"] == {"onnxruntime": {"passed": True, "failed": [], "delta_interval": None}}


def test_judging_the_regression_again_keeps_every_runtime_criterion():
    metrics = evaluation(openvino=OPENVINO, paddle_inference=PADDLE_TOO_LOSSY)
    gate_record = json.loads(json.dumps(decide(GatePolicy(), metrics, runtimes=("onnxruntime", "openvino")).as_dict(),
                                        sort_keys=True))
    worse = Criterion("release_regression_pts", 3.0, 1.0, "<=", "pts", False, note="vs release v9")
    again = with_criterion(gate_record, worse)
    assert not again["passed"] and len(again["criteria"]) == len(gate_record["criteria"])
    assert again["runtimes"]["onnxruntime"]["failed"] == ["release_regression_pts"]
    assert again["runtimes"]["openvino"]["passed"] and "delta_interval" in again["runtimes"]["onnxruntime"]

    headlines = runtime_headlines(metrics, gate_record, HEADLINE_METRICS)
    assert list(headlines) == ["onnxruntime", "openvino"]  # the runtimes judged, primary first
    assert headlines["openvino"]["int8_top1_pct"] == 97.2 and headlines["openvino"]["library"] == "openvino 2025.1"
    assert headlines["openvino"]["int8_ops"] == {"int8": 4, "total_conv_matmul": 4}
    assert headlines["onnxruntime"]["passed"] is True
    refreshed = with_verdicts(headlines, again)
    assert refreshed["onnxruntime"]["passed"] is False and refreshed["openvino"]["passed"] is True
    assert refreshed["onnxruntime"]["speedup_int8_vs_fp32"] == 2.0


def commit_evaluation(store, runtimes, metrics, files):
    version = store.create_version("m")
    with store.write_stage(version, "evaluate", {"runtimes": list(runtimes)}, {}) as writer:
        for name, arrays in files.items():
            np.savez(writer.dir / name, **arrays)
        writer.metrics.update(metrics)
    return writer.ref


def test_the_evidence_names_every_listed_runtimes_predictions(tmp_path):
    store = ArtifactStore(tmp_path / "store")
    arrays = {"labels": np.arange(4), "fp32_pred": np.arange(4), "int8_pred": np.arange(4)}
    metrics = evaluation(openvino=OPENVINO)
    listed = ("openvino", "onnxruntime", "paddle_inference")
    ref = commit_evaluation(store, listed, metrics, {"predictions.npz": arrays, "predictions_openvino.npz": arrays})
    read, predictions, stale = gate_evidence(store, ref)
    assert read == metrics and stale == ()
    assert list(predictions) == list(listed)  # the runtimes evaluate.runtimes lists, in its order
    assert predictions["onnxruntime"].name == "predictions.npz"
    assert predictions["openvino"].name == "predictions_openvino.npz"
    assert predictions["paddle_inference"] is None  # no metrics: the gate fails each of its criteria

    lost = commit_evaluation(store, ("onnxruntime", "openvino"), metrics, {"predictions.npz": arrays})
    _, predictions, stale = gate_evidence(store, lost)
    assert predictions["openvino"] is None
    assert stale == ("openvino: the evaluation has no predictions file 'predictions_openvino.npz'",)

    old = commit_evaluation(store, (), ORT, {"predictions.npz": arrays})  # evaluated before runtimes existed
    assert list(gate_evidence(store, old)[1]) == ["onnxruntime"]


def test_deciding_a_stored_version_again_judges_every_runtime_it_was_evaluated_in(tmp_path, capsys):
    from quantgate.cli import main

    store = ArtifactStore(tmp_path / "store")
    labels = np.arange(40) % 10
    arrays = {"labels": labels, "fp32_pred": labels, "int8_pred": labels}
    exact = {**ORT, "fp32_top1_pct": 100.0, "int8_top1_pct": 100.0, "agreement": 1.0}
    metrics = {**exact, "primary_runtime": "onnxruntime",
               "runtimes": {"onnxruntime": exact, "openvino": {**exact, "speedup_int8_vs_fp32": 0.8,
                                                               "predictions_file": "predictions_openvino.npz"}}}
    ref = commit_evaluation(store, ("onnxruntime", "openvino"), metrics,
                            {"predictions.npz": arrays, "predictions_openvino.npz": arrays})
    store.finalize_version(store.version("m", ref.version), {"status": "failed", "config": {"gate": {}}})
    assert main(["gate", ref.version, "--store", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "  gate      openvino.speedup = 0.8 x (must be >= 1) FAILED" in out
    assert "  runtimes  onnxruntime passed | openvino FAILED" in out
    assert main(["gate", ref.version, "--store", str(store.root), "--set", "gate.min_speedup=0.5"]) == 0
    assert "  runtimes  onnxruntime passed | openvino passed" in capsys.readouterr().out


# PP-OCRv4 rec in Paddle Inference's oneDNN INT8, by hand: 2 pts of lines lost, slower than FP32 at batch 1.
PADDLE_SLOWER = {**ORT, "fp32_top1_pct": 100.0, "int8_top1_pct": 98.0, "accuracy_delta_pts": -2.0, "agreement": 0.98,
                 "latency_ms_p50_fp32": 12.0, "latency_ms_p50_int8": 13.5, "speedup_int8_vs_fp32": 12.0 / 13.5,
                 "library": "paddle_inference 3.0.0", "int8_model": "PaddleSlim program",
                 "predictions_file": "predictions_paddle_inference.npz"}
BOTH = ("onnxruntime", "paddle_inference")


def policy_for(runtimes: tuple[str, ...], **gate) -> GatePolicy:
    """The gate section of a whole config, so a map is checked against evaluate.runtimes as in a run."""
    return validate_config({"evaluate": {"runtimes": list(runtimes)}, "gate": gate}).gate


def test_a_runtime_kept_for_information_may_be_slower_while_onnxruntime_is_still_gated_on_speed():
    policy = policy_for(BOTH, min_speedup={"onnxruntime": 1, "paddle_inference": 0}, max_accuracy_drop=2.5)
    decision = decide(policy, evaluation(paddle_inference=PADDLE_SLOWER), runtimes=BOTH)
    assert decision.passed and decision.runtimes["paddle_inference"]["passed"]
    assert by_name(decision)["paddle_inference.speedup"].describe() == (
        "paddle_inference.speedup = 0.8889 x (must be >= 0) ok: median 12 ms FP32 / 13.5 ms INT8 per call")
    assert by_name(decision)["speedup"].threshold == 1.0

    slower_everywhere = evaluation(paddle_inference=PADDLE_SLOWER)
    slower_everywhere.update(speedup_int8_vs_fp32=0.8)
    slower_everywhere["runtimes"]["onnxruntime"]["speedup_int8_vs_fp32"] = 0.8
    failed = decide(policy, slower_everywhere, runtimes=BOTH)
    assert [c.describe() for c in failed.failed] == ["speedup = 0.8 x (must be >= 1) FAILED: median 2 ms FP32 / 1 ms "
                                                     "INT8 per call"]
    # The same numbers under today's single threshold fail paddle_inference on speed.
    single = decide(GatePolicy(max_accuracy_drop=2.5), evaluation(paddle_inference=PADDLE_SLOWER), runtimes=BOTH)
    assert [c.name for c in single.failed] == ["paddle_inference.speedup"]


def test_every_per_runtime_threshold_may_differ_by_runtime_and_the_interval_follows_the_drop():
    metrics = evaluation(paddle_inference=PADDLE_TOO_LOSSY)  # 3.5 pts lost, agreement 0.95
    policy = policy_for(BOTH, max_accuracy_drop={"onnxruntime": 1, "paddle_inference": 4},
                        min_agreement={"onnxruntime": 0.98, "paddle_inference": 0.9},
                        min_int8_accuracy={"onnxruntime": 97, "paddle_inference": 90}, require_ci_within_drop=True)
    criteria = by_name(decide(policy, metrics, runtimes=BOTH))
    assert {name: criteria[name].threshold for name in criteria if name.startswith("paddle_inference.")} == {
        "paddle_inference.accuracy_drop_pts": 4.0, "paddle_inference.agreement": 0.9,
        "paddle_inference.int8_top1_pct": 90.0, "paddle_inference.delta_ci95_low_pts": -4.0,
        "paddle_inference.speedup": 1.0, "paddle_inference.release_regression_pts": 1.0}  # one number for all
    assert (criteria["accuracy_drop_pts"].threshold, criteria["delta_ci95_low_pts"].threshold) == (1.0, -1.0)
    assert criteria["paddle_inference.accuracy_drop_pts"].passed and criteria["paddle_inference.agreement"].passed


def test_the_text_gate_judges_each_runtime_by_its_own_cer_threshold():
    text = {"task": "text_recognition", "fp32_cer_pct": 1.0, "int8_cer_pct": 1.4, "cer_increase_pts": 0.4}
    paddle = {**PADDLE_SLOWER, "fp32_cer_pct": 1.0, "int8_cer_pct": 2.0, "cer_increase_pts": 1.0}
    metrics = {**evaluation(paddle_inference=paddle), **text}
    metrics["runtimes"]["onnxruntime"].update(text)
    policy = policy_for(BOTH, max_cer_increase_pts={"onnxruntime": 0.5, "paddle_inference": 1.5}, max_accuracy_drop=2.5,
                        min_speedup={"onnxruntime": 1, "paddle_inference": 0})
    decision = decide(policy, metrics, runtimes=BOTH)
    assert decision.passed and by_name(decision)["paddle_inference.cer_increase_pts"].threshold == 1.5
    stricter = policy.model_copy(update={"max_cer_increase_pts": {"onnxruntime": 0.5, "paddle_inference": 0.5}})
    assert [c.name for c in decide(stricter, metrics, runtimes=BOTH).failed] == ["paddle_inference.cer_increase_pts"]


def test_a_runtime_the_map_does_not_name_is_judged_by_its_strictest_value():
    # The INT8 search scores its candidates in onnxruntime, even when evaluate.runtimes does not list it.
    policy = policy_for(("openvino", "paddle_inference"), min_agreement={"openvino": 0.97, "paddle_inference": 0.9})
    agreement = by_name(decide(policy, {**ORT, "agreement": 0.95}))["agreement"]
    assert not agreement.passed and agreement.threshold == 0.97
    assert agreement.note == "gate.min_agreement names no onnxruntime: its strictest value applies"


def stored_version_slower_in_openvino(tmp_path) -> ArtifactStore:
    store = ArtifactStore(tmp_path / "store")
    labels = np.arange(40) % 10
    arrays = {"labels": labels, "fp32_pred": labels, "int8_pred": labels}
    exact = {**ORT, "fp32_top1_pct": 100.0, "int8_top1_pct": 100.0, "agreement": 1.0}
    metrics = {**exact, "primary_runtime": "onnxruntime",
               "runtimes": {"onnxruntime": exact, "openvino": {**exact, "speedup_int8_vs_fp32": 0.8,
                                                               "predictions_file": "predictions_openvino.npz"}}}
    ref = commit_evaluation(store, ("onnxruntime", "openvino"), metrics,
                            {"predictions.npz": arrays, "predictions_openvino.npz": arrays})
    store.finalize_version(store.version("m", ref.version), {"status": "failed", "config": {"gate": {}}})
    return store


def test_deciding_again_with_a_speed_threshold_by_runtime_passes_the_runtime_kept_for_information(tmp_path, capsys):
    from quantgate.cli import main

    store = stored_version_slower_in_openvino(tmp_path)
    by_runtime = "gate.min_speedup={onnxruntime: 1, openvino: 0}"
    assert main(["gate", "v1", "--store", str(store.root), "--set", by_runtime]) == 0
    out = capsys.readouterr().out
    assert "  gate      openvino.speedup = 0.8 x (must be >= 0) ok" in out
    assert "  gate      speedup = 2 x (must be >= 1) ok" in out
    recorded = next(line for line in out.splitlines() if line.startswith("  recorded  ")).split(maxsplit=1)[1]
    decision = json.loads(Path(recorded).read_text())
    assert decision["gate"]["policy"]["min_speedup"] == {"onnxruntime": 1.0, "openvino": 0.0}
    assert main(["gate", "v1", "--store", str(store.root), "--set", "gate.min_speedup={onnx: 0}"]) == 2
    assert "gate.min_speedup.by_runtime.onnx.[key]: Input should be 'onnxruntime', 'openvino' or " in (
        capsys.readouterr().err)
