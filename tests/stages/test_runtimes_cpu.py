"""What the evaluate stage records about the CPU, and onnxruntime's INT8 form for CPUs with AMX."""

from pathlib import Path

import numpy as np
import pytest
from support.cpu import needs_int8_dot_product

from quantgate.config import ConfigError, validate_config
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import ModelForm, open_runner
from quantgate.runtimes.ort_forms import CONVSYM_PATH, QGEMM_PATH, onnxruntime_int8_form, write_qgemm_form
from quantgate.stages.data import open_data
from quantgate.stages.evaluate.outputs import QGEMM_INT8_FILE, RUNTIME_NAMES

SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8 avx_vnni
"""


def test_the_cpu_record_lists_the_int8_relevant_flags_and_whether_amx_is_there(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS + SAPPHIRE_RAPIDS.replace("processor\t: 0", "processor\t: 1"))
    assert cpu_record(cpuinfo) == {
        "flags": ["amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512_vnni", "avx512f", "avx_vnni"],
        "model": "Intel(R) Xeon(R) Platinum 8480+", "amx": True}
    cpuinfo.write_text(SAPPHIRE_RAPIDS.replace(" amx_bf16 amx_tile amx_int8", ""))
    assert cpu_record(cpuinfo)["amx"] is False


def test_this_machines_cpu_record_matches_proc_cpuinfo():
    record = cpu_record()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo here")
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split(":")[1].split()
    assert record["flags"] == sorted(set(record["flags"])) and set(record["flags"]) <= set(flags)
    assert record["amx"] == ("amx_int8" in flags) and ("avx2" in record["flags"]) == ("avx2" in flags)
    assert record["model"]


def test_a_machine_without_proc_cpuinfo_records_no_flags_and_no_amx(tmp_path):
    record = cpu_record(tmp_path / "absent")
    assert record["flags"] == [] and record["amx"] is False


def test_every_evaluation_records_the_cpu(stage_dirs):
    assert stage_dirs.results["evaluate"].metrics["cpu"] == cpu_record()


@needs_int8_dot_product  # on AVX2 alone the two forms differ by up to 3.6 (measured): one of them saturates
def test_the_qgemm_form_computes_exactly_what_the_convsym_form_computes(stage_dirs, tmp_path):
    qgemm = tmp_path / QGEMM_INT8_FILE
    assert write_qgemm_form(stage_dirs.convert / "int8.onnx", qgemm) == 3  # the digits CNN's three convolutions
    images = open_data(stage_dirs.data).array("test", limit=64)[0]
    convsym = open_runner("onnxruntime", ModelForm(stage_dirs.convert / "int8.onnx", True, "", "convert"), 1, ())
    shifted = open_runner("onnxruntime", ModelForm(qgemm, True, "", "evaluate"), 1, ())
    np.testing.assert_array_equal(shifted(images), convsym(images))
    assert shifted.int8_ops()["int8_kernels"] == {"QLinearConv": 3, "MatMulIntegerToFloat": 1}


def test_with_amx_onnxruntime_times_both_forms_and_keeps_the_faster(stage_dirs, tiny_config, tmp_path):
    # Forced on whatever CPU runs the tests: the choice is measured, so it holds on any machine.
    convert = stage_dirs.convert
    forms = {"fp32": ModelForm(convert / "fp32.onnx", False, "fp32.onnx", "convert"),
             "int8": ModelForm(convert / "int8.onnx", True, "int8.onnx", "convert")}
    batch = open_data(stage_dirs.data).array("test", limit=16)[0]
    config = tiny_config(evaluate={"latency_repeats": 6}).evaluate
    chosen, latency, record = onnxruntime_int8_form(forms, True, batch, config, tmp_path)
    medians = record["ort_int8_paths_ms_p50"]
    faster = min(medians, key=medians.get)
    assert record["ort_int8_path"] == faster and record["ort_int8_weights_shifted"] == 3
    assert latency["int8"]["p50"] == medians[faster] and set(latency) >= {"fp32", "int8"}
    assert (chosen.path == tmp_path / QGEMM_INT8_FILE) == (faster == QGEMM_PATH)
    assert (tmp_path / QGEMM_INT8_FILE).exists() == (faster == QGEMM_PATH)  # the slower form is not left behind
    assert onnxruntime_int8_form(forms, False, batch, config, tmp_path)[1:] == (None, {"ort_int8_path": CONVSYM_PATH})


def test_evaluate_runtimes_defaults_to_onnxruntime_and_refuses_repeats_and_unknown_names():
    assert validate_config({}).evaluate.runtimes == ("onnxruntime",)
    assert validate_config({"evaluate": {"runtimes": list(RUNTIME_NAMES)}}).evaluate.runtimes == RUNTIME_NAMES
    with pytest.raises(ConfigError, match="lists openvino more than once"):
        validate_config({"evaluate": {"runtimes": ["openvino", "onnxruntime", "openvino"]}})
    with pytest.raises(ConfigError, match="unknown runtime.*'tensorrt'; choose from onnxruntime, openvino, paddle_inference"):
        validate_config({"evaluate": {"runtimes": ["tensorrt"]}})
    with pytest.raises(ConfigError, match="evaluate.runtimes"):
        validate_config({"evaluate": {"runtimes": []}})
