import struct

import numpy as np

from quantgate.config import GatePolicy
from quantgate.flows.duel import evidence
from quantgate.stages.duel import ReleaseModel, duel
from quantgate.stages.gate.decision import gate
from quantgate.stages.report.markdown import report


def png_size(path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_shows_fp32_vs_int8_the_gate_and_where_it_lives(stage_dirs, tmp_path):
    evaluation = stage_dirs.results["evaluate"].metrics
    gate_dir, out, duel_dir, released = (tmp_path / name for name in ("gate", "report", "duel", "released"))
    for folder in (gate_dir, out, duel_dir, released):
        folder.mkdir()
    # A release that read every test digit right: its stored predictions are reused by the duel.
    with np.load(stage_dirs.evaluate / "predictions.npz") as stored:
        np.savez(released / "predictions.npz", int8_pred=stored["labels"], sample_ids=stored["sample_ids"])
    release = ReleaseModel("v1", data_dir=stage_dirs.data, evaluate_dir=released,
                           evaluation={"primary_runtime": "onnxruntime"})
    record = duel(release, stage_dirs.data, stage_dirs.evaluate, evaluation, ("onnxruntime",), duel_dir).metrics
    decision = gate(GatePolicy(max_release_regression=0.0), evaluation, gate_dir,
                    stage_dirs.evaluate / "predictions.npz", evidence("v1", record, duel_dir))
    where = {"version": "/store/digits-cnn/versions/v7"}
    result = report("digits-cnn v7", evaluation, decision.as_dict(), stage_dirs.results["train"].metrics,
                    stage_dirs.train / "steps.csv", where, out, data_dir=stage_dirs.data,
                    evaluate_dir=stage_dirs.evaluate, duel_dir=duel_dir, duel_record=record)

    text = (out / result.report_file).read_text()
    assert text.startswith("# digits-cnn v7: gate FAILED")
    interval = decision.evidence["delta_interval"]
    assert f"{evaluation['fp32_top1_pct']:.2f} % | {evaluation['int8_top1_pct']:.2f} %" in text
    assert f"95 % CI [{interval['low_pts']:+.2f}, {interval['high_pts']:+.2f}]" in text
    assert f"{evaluation['agreement']:.4f} of test samples" in text
    assert f"{evaluation['latency_ms_p50_fp32']:.3f} / {evaluation['latency_ms_p90_fp32']:.3f}" in text
    assert "| release_regression_pts |" in text and "| **FAIL** | paired on 360 samples" in text
    # The duel: both models on the same samples, and the samples the release got right and this one wrong.
    assert "## vs release v1 (the same test samples)" in text and "| onnxruntime | 100.00 % |" in text
    assert "![Paired samples where the release and this version disagree](vs_release.png)" in text
    assert "| release | this version | truth | right |" in text and "vs_release.png" in result.plot_files
    assert png_size(out / "vs_release.png")[0] > 100
    assert "| accuracy_drop_pts |" in text and "| 9 |" in text  # per-class rows for all ten digits
    assert "- version: `/store/digits-cnn/versions/v7`" in text
    assert "![Training loss and loss scale per step](training.png)" in text
    scaler = stage_dirs.results["train"].metrics["scaler"]
    assert f"{scaler['skipped_steps']} of {scaler['steps']} steps skipped for inf/NaN gradients" in text

    assert "| true \\ predicted | 0 | 1 | 2 |" in text and "![Confusion matrices" in text  # the digits' names
    assert "## Where INT8 and FP32 disagree (test split)" in text and "Fonts: Strings in the pictures" in text
    for name in result.plot_files:
        width, height = png_size(out / name)
        if name in ("training.png", "per_class.png"):
            assert 600 <= width <= 1200 and 400 <= height <= 900
        assert (out / name).stat().st_size > 10_000  # real drawings, not empty canvases


def test_the_training_plot_marks_skipped_steps(tmp_path):
    from quantgate.stages.report.plots import training_plot

    steps = tmp_path / "steps.csv"
    rows = ["step,epoch,loss,loss_scale,skipped"] + [
        f"{i},{1 + i // 10},{2.0 / i},{32768.0 if i < 5 else 16384.0},{int(i in (4, 5))}" for i in range(1, 21)]
    steps.write_text("\n".join(rows) + "\n")
    plain, marked = tmp_path / "plain.png", tmp_path / "marked.png"
    training_plot(steps, marked, "with skipped steps")
    steps.write_text("\n".join(row.rsplit(",", 1)[0] for row in rows) + "\n")  # the same without the column
    training_plot(steps, plain, "with skipped steps")
    assert png_size(marked) == png_size(plain) and marked.read_bytes() != plain.read_bytes()
