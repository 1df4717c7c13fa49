import hashlib
import json
from pathlib import Path

import pytest
from prefect.exceptions import ParameterTypeError

from quantgate.artifacts import RUN_LOG_FILE, ArtifactStore
from quantgate.flows.publishing import GateFailed
from quantgate.flows.release import release
from quantgate.stages import PIPELINE as STAGES
from quantgate.stages.quantize.ptq import QuantizationError


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def store_with_release(tmp_path_factory, tiny_config):
    root = tmp_path_factory.mktemp("store")
    version = release(config=tiny_config(), store=str(root))
    return root, version


def test_a_passing_run_is_committed_hashed_and_released(store_with_release):
    root, version = store_with_release
    assert version == "v1"
    store = ArtifactStore(root)
    assert store.alias("digits-cnn", "release") == "v1" == store.alias("digits-cnn", "latest")
    version_dir = root / "digits-cnn" / "versions" / "v1"
    # run.log: what the libraries printed while the stages ran (Paddle's C++ logging, paddle2onnx, PaddleSlim)
    # No source stage (trained here) and no duel (nothing was released before v1).
    ran = [stage for stage in STAGES if stage not in ("source", "system", "duel")]
    assert sorted(p.name for p in version_dir.iterdir()) == sorted([*ran, "checkpoints", "version.json",
                                                                    RUN_LOG_FILE])
    assert "[Paddle2ONNX]" in (version_dir / RUN_LOG_FILE).read_text()
    assert not list(version_dir.glob(".staging-*")) and not list(version_dir.glob("checkpoints/*/.staging-*"))

    for stage in ran:
        manifest = json.loads((version_dir / stage / "manifest.json").read_text())
        assert manifest["stage"] == stage and manifest["version"] == "v1"
        on_disk = {p.relative_to(version_dir / stage).as_posix() for p in (version_dir / stage).rglob("*")
                   if p.is_file() and p.name != "manifest.json"}
        assert set(manifest["files"]) == on_disk
        for name, entry in manifest["files"].items():
            assert sha256(version_dir / stage / name) == entry["sha256"]
        assert {"paddlepaddle", "paddleslim", "paddle2onnx", "onnxruntime", "prefect"} <= set(manifest["libraries"])

    train = json.loads((version_dir / "train" / "manifest.json").read_text())
    assert train["inputs"]["data"]["manifest_sha256"] == sha256(version_dir / "data" / "manifest.json")
    assert train["metrics"]["amp"]["effective"] is False and train["metrics"]["amp"]["requested"]["level"] == "O1"
    record = json.loads((version_dir / "version.json").read_text())
    assert record["status"] == "passed" and record["gate"]["passed"] is True
    assert record["metrics"]["fp32_top1_pct"] > 85


def test_a_policy_the_run_cannot_meet_fails_and_leaves_release(store_with_release, tiny_config):
    root, _ = store_with_release
    # An INT8 top-1 of 100 % on 360 real test digits after one epoch at a negligible learning rate
    # is out of reach; the floor is valid, so the run goes all the way to the gate and fails there.
    config = tiny_config(train={"epochs": 1, "learning_rate": 1e-9}, gate={"min_int8_accuracy": 100.0})
    with pytest.raises(GateFailed) as caught:
        release(config=config, store=str(root))
    assert caught.value.version == "v2"
    assert "int8_top1_pct" in str(caught.value) and "must be >= 100" in str(caught.value)
    store = ArtifactStore(root)
    assert store.alias("digits-cnn", "release") == "v1"
    assert store.alias("digits-cnn", "latest") == "v2"
    gate = json.loads((root / "digits-cnn" / "versions" / "v2" / "gate" / "gate.json").read_text())
    assert gate["passed"] is False
    failed = [c for c in gate["criteria"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["int8_top1_pct", "release_regression_pts"]
    # Judged against v1 on the same 360 test samples, v1's stored predictions reused (v1 not run again).
    assert failed[0]["threshold"] == 100.0 and failed[1]["note"].startswith("paired on 360 samples")
    duel = gate["release_duel"]
    assert duel["version"] == "v1" and duel["paired_samples"] == 360 and duel["dropped_overlap"] == 0
    paired = duel["runtimes"]["onnxruntime"]
    assert paired["release_predictions"] == "the release's stored evaluation" and paired["scored_samples"] == 0
    v1 = store.version_record(store.version("digits-cnn", "v1"))["metrics"]["int8_top1_pct"]
    assert paired["release_int8_top1_pct"] == pytest.approx(v1) and v1 > 85  # the same split: v1's own number
    assert failed[1]["measured"] == pytest.approx(v1 - gate["criteria"][2]["measured"])
    report = (root / "digits-cnn" / "versions" / "v2" / "report" / "report.md").read_text()
    assert "## vs release v1 (the same test samples)" in report and "vs_release.png" in report
    assert {info.version: info.status for info in store.versions("digits-cnn")}["v2"] == "failed"


def test_a_stage_error_marks_the_version_and_moves_nothing(store_with_release, tiny_config):
    root, _ = store_with_release
    config = tiny_config(quantize={"batch_size": 32, "batch_nums": 1000})
    with pytest.raises(QuantizationError, match="lower quantize.batch_nums") as caught:
        release(config=config, store=str(root))
    assert any("recorded with status 'error'" in note for note in caught.value.__notes__)
    store = ArtifactStore(root)
    errored = [info for info in store.versions("digits-cnn") if info.status == "error"]
    assert len(errored) == 1 and "QuantizationError" in errored[0].record["error"]
    version_dir = root / "digits-cnn" / "versions" / errored[0].version
    # Refused right after the data split, before any training.
    assert sorted(p.name for p in version_dir.iterdir()) == ["data", "version.json"]
    assert store.alias("digits-cnn", "release") == "v1"


def test_invalid_parameters_are_refused_before_any_stage_runs(tmp_path):
    # What `prefect deployment run --param` sends: plain JSON, validated against the typed schema.
    with pytest.raises(ParameterTypeError, match="min_agreement") as caught:
        release(config={"gate": {"min_agreement": 1.5}, "train": {"epochs": 1}}, store=str(tmp_path / "store"))
    assert "less than or equal to 1" in str(caught.value)
    assert not (tmp_path / "store").exists()


def test_the_run_publishes_its_metrics_and_verdict_as_a_prefect_table(store_with_release):
    from prefect.artifacts import Artifact

    artifact = Artifact.get("digits-cnn-release")
    assert artifact is not None and artifact.type == "table"
    rows = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    by_metric = {row["metric"]: row for row in rows}
    assert {"top-1 accuracy (%)", "prediction agreement", "gate: accuracy_drop_pts", "gate: agreement"} <= set(by_metric)
    assert by_metric["gate: agreement"]["note"].startswith(">= 0.98")


def test_the_run_stores_a_report_with_plots_and_publishes_it_as_markdown(store_with_release):
    from prefect.artifacts import Artifact

    root, version = store_with_release
    report_dir = root / "digits-cnn" / "versions" / version / "report"
    text = (report_dir / "report.md").read_text()
    assert text.startswith("# digits-cnn v1: gate PASSED") and "95 % CI [" in text
    assert "release_regression_pts | missing" in text and "not applicable | no release version yet" in text
    assert f"- version: `{root / 'digits-cnn' / 'versions' / 'v1'}`" in text
    assert (report_dir / "training.png").read_bytes()[:4] == b"\x89PNG"
    assert (report_dir / "per_class.png").read_bytes()[:4] == b"\x89PNG"

    # The key's newest artifact is from the latest run that reached the report (v1, or v2 if the tests above ran).
    artifact = Artifact.get("digits-cnn-report")
    assert artifact is not None and artifact.type == "markdown"
    published = artifact.data.split()[2].rstrip(":")
    published_dir = root / "digits-cnn" / "versions" / published / "report"
    stored = (published_dir / "report.md").read_text()
    assert artifact.data.startswith(stored.split("![")[0]) and "## Per-class top-1 (%)" in artifact.data
    # Images cannot load from the store inside Prefect's UI, so their paths are shown instead.
    assert f"`{published_dir / 'training.png'}`" in artifact.data and "![" not in artifact.data


def test_the_flows_alias_moves_are_in_the_audit_log(store_with_release):
    root, _ = store_with_release
    first_moves = ArtifactStore(root).audit_log("digits-cnn")[:2]
    assert [(e["alias"], e["from"], e["to"]) for e in first_moves] == [("latest", None, "v1"), ("release", None, "v1")]
    assert first_moves[1]["why"] == "gate passed" and "@" in first_moves[1]["who"]
