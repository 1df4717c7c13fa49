"""The report and the Prefect table show every runtime side by side, with the CPU that timed them."""

import json

from test_gate_runtimes import OPENVINO, ORT, PADDLE_TOO_LOSSY, evaluation
from test_report import png_size
from test_report_gallery import FP32, classification_run

from quantgate.config import GatePolicy
from quantgate.flows.report import runtimes_table
from quantgate.policy.decision import decide
from quantgate.policy.runtimes import runtime_headlines
from quantgate.stages.evaluate.outputs import HEADLINE_METRICS
from quantgate.stages.report.markdown import render_markdown, report

CPU = {"flags": ["amx_int8", "amx_tile", "avx2", "avx512_vnni", "avx512f"], "model": "Intel(R) Xeon(R) Platinum 8480+",
       "amx": True}
LISTED = ("onnxruntime", "openvino", "paddle_inference")


def three_runtimes() -> tuple[dict, dict]:
    metrics = {**evaluation(openvino=OPENVINO, paddle_inference=PADDLE_TOO_LOSSY), "cpu": CPU}
    metrics["runtimes"]["onnxruntime"].update(library="onnxruntime 1.22.0", int8_model="int8.onnx",
                                              int8_ops={"int8": 3, "total_conv_matmul": 4})
    gate_record = json.loads(json.dumps(decide(GatePolicy(), metrics, runtimes=LISTED).as_dict(), sort_keys=True))
    return metrics, gate_record


def folders(tmp_path) -> dict:
    """The data and evaluate stages' folders the report reads (INT8 and FP32 agree on every test image)."""
    data, evaluate = classification_run(tmp_path, classes=[str(k) for k in range(3)], fp32=FP32, int8=FP32)
    return {"data_dir": data, "evaluate_dir": evaluate}


def steps_csv(folder):
    path = folder / "steps.csv"
    path.write_text("step,epoch,loss,loss_scale\n" + "".join(f"{i},{1 + i // 5},{2.0 / i},1.0\n" for i in range(1, 11)))
    return path


def test_the_report_puts_every_runtime_side_by_side_with_its_verdict_and_the_cpu(tmp_path):
    metrics, gate_record = three_runtimes()
    out = tmp_path / "report"
    out.mkdir()
    result = report("m v2", metrics, gate_record, {}, steps_csv(tmp_path), {}, out, **folders(tmp_path))
    text = (out / result.report_file).read_text()
    assert text.startswith("# m v2: gate FAILED")
    assert ("CPU: Intel(R) Xeon(R) Platinum 8480+; flags: amx_int8, amx_tile, avx2, avx512_vnni, avx512f "
            "(AMX available)") in text
    assert "## Runtimes side by side (every one must pass)" in text
    assert ("| onnxruntime (onnxruntime 1.22.0) | int8.onnx | 97.50 % | 97.00 % | +0.50 | 0.9900 | 2.000 | 1.000 "
            "| 2.00x | 3 of 4 | pass |") in text
    assert ("| openvino (openvino 2025.1) | int8_paddle2onnx.onnx | 97.50 % | 97.20 % | +0.30 | 0.9900 | 2.000 "
            "| 1.000 | 2.50x | 4 of 4 | pass |") in text
    assert ("| paddle_inference (paddle_inference 3.0.0) | PaddleSlim program | 97.50 % | 94.00 % | +3.50 | 0.9500 "
            "| 2.000 | 1.000 | 2.00x | n/a | **FAIL** (paddle_inference.accuracy_drop_pts, "
            "paddle_inference.agreement) |") in text
    assert "| paddle_inference.accuracy_drop_pts | 3.5 pts | <= 1 | **FAIL** |" in text  # the gate table names it
    assert result.plot_files == ("training.png", "per_class.png", "confusion.png", "runtimes.png")
    assert "![Latency per runtime, FP32 vs INT8](runtimes.png)" in text
    width, height = png_size(out / "runtimes.png")
    assert 600 <= width <= 1200 and 400 <= height <= 900 and (out / "runtimes.png").stat().st_size > 10_000


def test_a_version_in_one_runtime_gets_no_side_by_side_table(tmp_path):
    gate_record = decide(GatePolicy(), ORT).as_dict()
    text = render_markdown("m v1", ORT, gate_record, {}, {})
    assert "## FP32 vs INT8 (onnxruntime, n/a test samples)" in text
    assert "Runtimes side by side" not in text and "CPU:" not in text and "runtimes.png" not in text
    out = tmp_path / "report"
    out.mkdir()
    result = report("m v1", ORT, gate_record, {}, steps_csv(tmp_path), {}, out, **folders(tmp_path))
    assert result.plot_files == ("training.png", "per_class.png", "confusion.png")
    assert not (out / "runtimes.png").exists()
    # Without onnxruntime the headline table names the runtime its numbers come from.
    assert "## FP32 vs INT8 (openvino," in render_markdown("m v1", {**OPENVINO, "primary_runtime": "openvino"},
                                                          gate_record, {}, {})


def test_the_prefect_table_has_one_row_per_runtime():
    metrics, gate_record = three_runtimes()
    rows = runtimes_table({"runtimes": runtime_headlines(metrics, gate_record, HEADLINE_METRICS)})
    assert [row["runtime"] for row in rows] == list(LISTED)
    assert rows[1] == {"runtime": "openvino", "library": "openvino 2025.1", "fp32 top-1 (%)": "97.50",
                       "int8 top-1 (%)": "97.20", "delta (pts)": "-0.30", "agreement": "0.9900",
                       "p50 fp32 (ms)": "2.000", "p50 int8 (ms)": "1.000", "speedup": "2.50", "int8 ops": "4/4",
                       "verdict": "pass"}
    assert rows[2]["verdict"] == "FAIL: paddle_inference.accuracy_drop_pts, paddle_inference.agreement"


def test_a_runtime_whose_int8_is_slower_than_its_fp32_is_named_with_what_is_known(tmp_path):
    metrics, gate_record = three_runtimes()
    metrics["latency_batch_size"] = 16
    metrics["runtimes"]["paddle_inference"].update(latency_ms_p50_fp32_batch1=12.91, latency_ms_p50_int8_batch1=13.52,
                                                   int8_ops={"int8": 51, "total_conv_matmul": 51})
    metrics["cpu"] = {"flags": ["avx2"], "model": "AMD EPYC", "amx": False}
    out = tmp_path / "report"
    out.mkdir()
    result = report("m v2", metrics, gate_record, {}, steps_csv(tmp_path), {}, out, **folders(tmp_path))
    text = (out / result.report_file).read_text()
    assert ("- **paddle_inference: INT8 is slower than its FP32 at batch 1** (13.520 vs 12.910 ms p50). Known: this "
            "CPU has no VNNI or AMX integer dot-product instructions; 51 of 51 convolutions/matmuls ran as INT8 "
            "kernels.") in text
    assert "onnxruntime: INT8 is slower" not in text and "at batch 16" not in text  # faster there: nothing said


def test_what_paddle_inference_left_in_float_is_said_where_its_int8_is_slower(tmp_path):
    metrics, gate_record = three_runtimes()
    metrics["runtimes"]["paddle_inference"].update(
        latency_ms_p50_fp32_batch1=41.02, latency_ms_p50_int8_batch1=43.55,
        int8_ops={"int8": 51, "total_conv_matmul": 51, "conversions": {"dequantize": 8, "quantize": 39},
                  "float_compute": {"fused_elementwise_add": 56, "fused_elementwise_mul": 56, "hard_swish": 28,
                                    "layer_norm": 5, "softmax": 3}})
    metrics["cpu"] = {"flags": ["avx512_vnni", "amx_int8"], "model": "Intel Xeon", "amx": True}
    out = tmp_path / "report"
    out.mkdir()
    result = report("m v2", metrics, gate_record, {}, steps_csv(tmp_path), {}, out, **folders(tmp_path))
    text = (out / result.report_file).read_text()
    assert ("Known: 51 of 51 convolutions/matmuls ran as INT8 kernels; 8 dequantize and 39 quantize ops convert "
            "between float and int8 at run time; 148 ops still compute in float between them (56 "
            "fused_elementwise_add, 56 fused_elementwise_mul, 28 hard_swish, 5 layer_norm, ...).") in text
