import onnx
import pytest

from quantgate.config import QuantizeConfig
from quantgate.stages.quantize.ptq import QuantizationError, calibration_batches, quantize


def test_paddleslim_inserted_int8_quantization(stage_dirs):
    metrics = stage_dirs.results["quantize"].metrics
    assert metrics["quantize_linear_ops"] > 0 and metrics["dequantize_linear_ops"] > 0
    assert metrics["int8_ops"]["conv2d"] == metrics["fp32_ops"]["conv2d"] == 3
    assert metrics["calibration_samples"] == 270  # the whole held-out calibration split


def test_too_few_calibration_samples_is_a_clear_error(stage_dirs, tmp_path):
    config = QuantizeConfig(batch_size=32, batch_nums=100)
    with pytest.raises(QuantizationError, match="needs 3200 calibration samples.*has 270.*lower quantize.batch_nums"):
        quantize(config, stage_dirs.export, "model.pdmodel", "model.pdiparams", stage_dirs.data, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_calibration_split_is_a_clear_error():
    with pytest.raises(QuantizationError, match="calibration split is empty; raise data.calibration_fraction"):
        calibration_batches(0, QuantizeConfig())


def test_both_onnx_models_pass_the_checker_and_int8_carries_qdq(stage_dirs):
    for name in ("fp32.onnx", "int8.onnx"):
        onnx.checker.check_model(str(stage_dirs.convert / name), full_check=True)
    int8_ops = {node.op_type for node in onnx.load(str(stage_dirs.convert / "int8.onnx")).graph.node}
    fp32_ops = {node.op_type for node in onnx.load(str(stage_dirs.convert / "fp32.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= int8_ops
    assert not {"QuantizeLinear", "DequantizeLinear"} & fp32_ops
    assert stage_dirs.results["convert"].metrics["opset"] == 13
