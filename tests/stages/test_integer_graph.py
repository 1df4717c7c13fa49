"""The deployed INT8 graph described once and checked op by op, on the tiny pattern nets of PP-OCRv4's recognizer
(PaddleSlim -> paddle2onnx -> the lowering), with and without HardSwish grids: every integer tensor is described on
the model's own grid, each of onnxruntime's integer kernels computes what the QDQ model says within one code, and
the whole model what the numpy simulation does.

7-bit weights run on every CPU (onnxruntime's u8 x s8 kernels are exact with them on AVX2, see
quantgate/int8/weight_range.py); 8-bit weights only where the CPU sums INT8 products in 32 bits (VNNI, AMX).
"""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from quantgate.int8 import integer_graph
from quantgate.int8.integer_graph import check_ops, describe, simulate_model, simulate_op
from quantgate.int8.lower_int8 import Lowering, lower_int8
from quantgate.int8.onnx_ops import runtime_op_counts
from tests.stages.test_lowering_patterns import models  # noqa: F401  (the module's fixture: the pattern nets)
from tests.support.cpu import needs_int8_dot_product
from tests.support.pattern_nets import PATTERNS

# Measured on the pattern nets (December 2026, VNNI/AMX CPU, 7- and 8-bit weights): onnxruntime's logits and
# simulate_model's differ by at most 3.1e-7 of the largest logit. One code more or less in the last integer tensor
# moves a logit by ~3e-5 of it (lab_hardswish), so this leaves room for a few dozen such codes, not for an op
# that computes something else.
LOGIT_TOLERANCE = 1e-3  # of the largest |logit|
# onnxruntime has no integer HardSigmoid: the SE block's runs in float between its DequantizeLinear and QuantizeLinear.
RUN_IN_FLOAT = {"HardSigmoid"}

WEIGHT_BITS = [7, pytest.param(8, marks=needs_int8_dot_product)]  # what onnxruntime computes depends on the CPU
CASES = [pytest.param(pattern, grids, id=f"{pattern}-{'grids' if grids else 'plain'}")
         for pattern in PATTERNS for grids in (False, True)]


@pytest.fixture(scope="module")
def lowered(models, tmp_path_factory):  # noqa: F811
    """(model, lowering metrics, held-out inputs, file) of a pattern net lowered as the convert stage lowers it."""
    cache = {}

    def get(pattern: str, hardswish_grids: bool, weight_bits: int):
        key = pattern, hardswish_grids, weight_bits
        if key not in cache:
            model = models(pattern)
            out = tmp_path_factory.mktemp(pattern) / "int8.onnx"
            metrics = lower_int8(model.raw_onnx, out, paddle_model_prefix=model.paddle_prefix,
                                 **Lowering(weight_bits, hardswish_grids).options()).metrics
            cache[key] = onnx.load(str(out)), metrics, model.inputs, out
        return cache[key]
    return get


@pytest.mark.parametrize("bits", [7, 8])  # what the model says does not
@pytest.mark.parametrize(("pattern", "grids"), CASES)
def test_the_description_covers_every_integer_tensor_on_the_models_own_grid(lowered, pattern, grids, bits):
    model, metrics, _, _ = lowered(pattern, grids, bits)
    graph = describe(model)
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    described = {tensor.name: tensor for tensor in graph.tensors}
    assert len(described) == len(graph.tensors)
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear":  # written on the QuantizeLinear's grid
            tensor = described[node.output[0]]
            np.testing.assert_array_equal(tensor.grid.scale, constants[node.input[1]])
            np.testing.assert_array_equal(tensor.grid.zero_point, constants[node.input[2]])
            assert tensor.dtype == "uint8" and tensor.bits == 8 and not tensor.initializer
        elif node.op_type == "DequantizeLinear":  # read on the DequantizeLinear's: the tensor's, or a listed other
            tensor = described[node.input[0]]
            assert tensor.initializer == (node.input[0] in constants)
            grids_read = [tensor.grid, *tensor.read_grids]
            assert any(np.array_equal(grid.scale, constants[node.input[1]]) and (
                len(node.input) < 3 or np.array_equal(grid.zero_point, constants[node.input[2]])) for grid in grids_read)
    summary = graph.summary()
    # 7 bits: exactly the weights the lowering put on onnxruntime's reduced range
    assert summary["integer_tensors_by_bits"].get("7", 0) == metrics["reduced_range_weights"]
    assert (metrics["reduced_range_weights"] > 0) == (bits == 7)
    assert set(summary["integer_tensors_by_dtype"]) <= {"uint8", "int8", "int32"}
    record = json.loads(json.dumps(graph.record()))  # JSON as it is
    assert len(record["tensors"]) == len(graph.tensors) and len(json.dumps(record)) < 12_000


@pytest.mark.parametrize("bits", WEIGHT_BITS)
@pytest.mark.parametrize(("pattern", "grids"), CASES)
def test_each_integer_kernel_computes_the_qdq_op_within_one_code(lowered, pattern, grids, bits):
    model, _, inputs, path = lowered(pattern, grids, bits)
    checks = check_ops(model, {"x": inputs})
    assert checks and len(checks) == len(describe(model).ops)
    for check in checks:
        assert check.max_code_difference <= 1 and check.share_off_by_more_than_one == 0, check
        assert check.kernel.startswith("QLinear") or check.op_type in RUN_IN_FLOAT, check
    # exposing the codes left every integer kernel onnxruntime fuses without them
    ops = runtime_op_counts(path)["ops"]
    fused = [check.kernel for check in checks if check.kernel.startswith("QLinear")]
    assert len(fused) == sum(count for op, count in ops.items() if op.startswith("QLinear"))


@pytest.mark.parametrize("bits", WEIGHT_BITS)
@pytest.mark.parametrize(("pattern", "grids"), CASES)
def test_the_whole_model_in_onnxruntime_is_the_numpy_simulation_within_the_logit_tolerance(lowered, pattern, grids,
                                                                                         bits):
    model, _, inputs, path = lowered(pattern, grids, bits)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"x": inputs})[0]
    simulated = simulate_model(model, {"x": inputs})[0]
    assert simulated.shape == logits.shape
    assert np.abs(simulated - logits).max() <= LOGIT_TOLERANCE * np.abs(logits).max()


def test_a_scale_changed_after_the_description_shows_in_that_ops_check_alone(lowered):
    # the convert stage describes the model; a file that no longer computes that description fails the check
    model, _, inputs, _ = lowered("se_block", False, 7)
    recorded = describe(model)
    stem = recorded.ops[0]
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    quantize = next(node for node in changed.graph.node if node.op_type == "QuantizeLinear"
                    and node.output[0] == stem.output)
    scale = next(numpy_helper.to_array(init) for init in changed.graph.initializer if init.name == quantize.input[1])
    # its own initializer: the DequantizeLinear after it shares the original, and keeps reading on the recorded grid
    changed.graph.initializer.append(numpy_helper.from_array((scale * 1.25).astype(np.float32), "changed_scale"))
    quantize.input[1] = "changed_scale"
    checks = {check.op: check for check in check_ops(changed, {"x": inputs}, recorded)}
    assert checks[stem.name].max_code_difference > 1 and checks[stem.name].share_off_by_more_than_one > 0.01
    assert all(check.max_code_difference <= 1 for name, check in checks.items() if name != stem.name)
    # held to its own description, the changed model is a consistent QDQ model that onnxruntime computes
    assert all(check.max_code_difference <= 1 for check in check_ops(changed, {"x": inputs}))


def activation_codes(model: onnx.ModelProto, graph, inputs: np.ndarray) -> dict:
    """The codes every integer op of `graph` reads, as onnxruntime computes them."""
    names = list(dict.fromkeys(name for op in graph.ops for name in op.activation_inputs))
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, {"x": inputs})))


def test_an_op_type_without_a_hand_written_simulation_runs_in_onnxs_reference_evaluator(lowered, monkeypatch):
    model, _, inputs, _ = lowered("se_block", False, 7)
    graph = describe(model)
    codes = activation_codes(model, graph, inputs)
    by_hand = [simulate_op(op, codes) for op in graph.ops]
    monkeypatch.setattr(integer_graph, "FLOAT_OPS", {})  # every op to the reference evaluator (MaxPool goes there)
    for op, expected in zip(graph.ops, by_hand):
        assert np.abs(simulate_op(op, codes).astype(int) - expected.astype(int)).max() <= 1, op.name
