"""Lower paddle2onnx's INT8 model into the form onnxruntime runs with integer kernels.

paddle2onnx writes PaddleSlim's decisions as QuantizeLinear/DequantizeLinear pairs around float
weights, with int8 activations. On x86 onnxruntime fuses int8-activation convolutions only
partly and keeps every weight float, so that model is slower than FP32 and just as large.

The lowering keeps PaddleSlim the only source of quantization decisions (which tensors, their
scales, per-channel weight scales) and lets onnxruntime's own quantizer re-encode them:

1. read every Q/DQ pair of the paddle2onnx model: the tensor it quantizes and PaddleSlim's scale
   (`paddle_quantization`);
2. remove the pairs, leaving the float graph PaddleSlim calibrated (BatchNorm already folded);
3. run `onnxruntime.quantization.quantize_static` (QDQ format) on that graph, restricted to the
   nodes PaddleSlim quantized, with every scale given as a tensor override: weights int8
   (per channel where Paddle was), activations uint8 with zero point 128, which is an exact
   shift of Paddle's symmetric int8 (q_u8 = q_s8 + 128 over the same [-128, 127] range).

The calibration ranges handed to the quantizer list only PaddleSlim's tensors, so the quantizer
raises rather than invent a scale for a tensor PaddleSlim did not quantize. Two refinements,
both documented where they are made: ReLU/ReLU6 after a quantized op are folded into its output
quantization (`folded_activations`), and linear layers whose Q/DQ paddle2onnx 1.3.1 drops get
PaddleSlim's scales back from its program (`paddle_program_scales`). Layers PaddleSlim left in FP32
stay FP32, whatever paddle2onnx wrote for them (`float_layers`).

Two rewrites of the quantized graph then keep real backbones (PP-LCNetV3) in integers between their
convolutions: scalar affines beside a quantization become a change of that grid (`affine_absorption`),
and HardSwish between two quantizations runs as QLinearAdd + QLinearMul (`integer_hardswish`).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

from quantgate.int8.affine_absorption import absorb_scalar_affines
from quantgate.int8.errors import ConversionError
from quantgate.int8.float_groups import without_feeding_grids
from quantgate.int8.float_layers import read_float_inputs, shield_from_weight_quantization
from quantgate.int8.integer_hardswish import integer_hardswish
from quantgate.int8.onnx_ops import drop_unused_initializers, integer_op_counts
from quantgate.int8.paddle_quantization import (
    PaddleQuantization,
    WeightScales,
    paddle_program_scales,
    read_paddle_quantization,
)
from quantgate.int8.scale_propagation import PropagatedScales, propagate_scales
from quantgate.int8.weight_range import reduce_weight_range

UINT8_ZERO_POINT = 128  # Paddle's symmetric int8, shifted into the uint8 range x86 kernels are fastest on


def _drop_zero_bias_zero_points(model: onnx.ModelProto) -> onnx.ModelProto:
    """The quantizer stores an all-zero int32 zero point per bias channel; 0 is the default, so drop it."""
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and len(node.input) == 3 and node.input[2] in initializers:
            zero_point = initializers[node.input[2]]
            if zero_point.data_type == onnx.TensorProto.INT32 and not numpy_helper.to_array(zero_point).any():
                del node.input[2]
    drop_unused_initializers(graph)
    return model


def float_output_op_types(quantization: PaddleQuantization, nodes: list[str]) -> list[str]:
    """Linear-layer op types whose outputs feed no lowered node (e.g. the classifier's logits).

    Quantizing such an output only rounds it before float ops (bias, softmax): left float, the layer
    runs as onnxruntime's MatMulIntegerToFloat, still an integer kernel. Decided per op type, as
    onnxruntime's option is, and only when it holds for every node of that type.
    """
    graph = quantization.float_model.graph
    lowered = set(nodes)
    consumers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.name)
    types = []
    for op_type in ("MatMul", "Gemm"):
        layers = [node for node in graph.node if node.op_type == op_type and node.name in lowered]
        if layers and not any(consumers.get(node.output[0], set()) & lowered for node in layers):
            types.append(op_type)
    return types


def _per_tensor(quant_type: QuantType, scale: float, zero_point: int) -> dict:
    dtype = np.uint8 if quant_type == QuantType.QUInt8 else np.int8
    return {"quant_type": quant_type, "scale": np.array(scale, np.float32), "zero_point": np.array(zero_point, dtype)}


def _relu_outputs(quantization: PaddleQuantization) -> dict[str, onnx.NodeProto]:
    """ReLU/ReLU6 outputs with a PaddleSlim scale whose quantization range [-T, T] (T = 127 x scale)
    they never leave below 0: a Clip qualifies when it is a ReLU6 whose upper bound lies at or above
    T (so clipping at T is what Paddle's saturation already did)."""
    graph = quantization.float_model.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    relus = {}
    for node in graph.node:
        output = node.output[0] if node.output else ""
        if output not in quantization.activation_scales:
            continue
        threshold = 127 * quantization.activation_scales[output]
        if node.op_type == "Clip":
            bounds = [constants.get(name) for name in node.input[1:3]]
            if len(bounds) != 2 or any(bound is None for bound in bounds):
                continue
            if not (float(bounds[0]) == 0.0 and float(bounds[1]) >= threshold):
                continue
        elif node.op_type != "Relu":
            continue
        relus[output] = node
    return relus


def folded_activations(quantization: PaddleQuantization) -> dict[str, str]:
    """ReLU/ReLU6 nodes that the quantization itself can apply: activation output -> its input.

    PaddleSlim quantizes a ReLU's output on [-T, T], so half its codes are never used. Encoded as
    uint8 with zero point 0 on [0, T] (scale T/255), the quantization clips at 0 and T exactly as
    the ReLU and Paddle's saturation did, with a grid twice as fine; onnxruntime then drops the
    ReLU and fuses Conv/Add+ReLU into one integer op, as Paddle Inference's oneDNN INT8 fuses
    conv+relu. That needs the ReLU to be lowered (its input quantized) and its input read by it alone.
    """
    graph = quantization.float_model.graph
    consumers = Counter(name for node in graph.node for name in node.input)
    outputs = {output.name for output in graph.output}
    lowered = set(quantization.quantized_nodes)
    return {output: node.input[0] for output, node in _relu_outputs(quantization).items()
            if node.name in lowered and consumers[node.input[0]] == 1 and node.input[0] not in outputs}


def unsigned_activation_outputs(quantization: PaddleQuantization) -> list[str]:
    """ReLU/ReLU6 outputs that stay float ops (their input is not quantized, e.g. a float layer's
    output) but whose output is: the same [0, T] uint8 encoding applies to the output alone."""
    folded = folded_activations(quantization)
    return [output for output in _relu_outputs(quantization) if output not in folded]


def tensor_overrides(quantization: PaddleQuantization, fold_activations: bool) -> dict[str, list[dict]]:
    """PaddleSlim's scales in onnxruntime's TensorQuantOverrides form."""
    overrides = {name: [_per_tensor(QuantType.QUInt8, scale, UINT8_ZERO_POINT)]
                 for name, scale in quantization.activation_scales.items()}
    if fold_activations:
        for output, activation_input in folded_activations(quantization).items():
            scale = 127 * quantization.activation_scales[output] / 255
            overrides[output] = overrides[activation_input] = [_per_tensor(QuantType.QUInt8, scale, 0)]
        for output in unsigned_activation_outputs(quantization):
            overrides[output] = [_per_tensor(QuantType.QUInt8, 127 * quantization.activation_scales[output] / 255, 0)]
    for name, (scales, axis) in quantization.weight_scales.items():
        # An all-zero channel (pruned, or a BatchNorm gamma of 0) has PaddleSlim scale 0; any scale stores its
        # zeros exactly, and 1 keeps its int32 bias (scale = input scale x weight scale) finite and exact enough.
        scales = np.where(scales == 0, np.float32(1), scales)
        if axis is None:
            overrides[name] = [_per_tensor(QuantType.QInt8, scales[0], 0)]
        else:
            overrides[name] = [{**_per_tensor(QuantType.QInt8, scale, 0), "axis": axis} for scale in scales]
    return overrides



@dataclass(frozen=True)
class LoweringResult:
    metrics: dict


@dataclass(frozen=True)
class Lowering:
    """The lowering choices the convert stage makes for a machine and a config (`weight_bits`: its CPU,
    `convert.hardswish_grids`), which the search's trials and fall-back estimates must make the same way:
    `lower_int8(..., **lowering.options())`."""

    weight_bits: int = 8
    hardswish_grids: bool = False
    float_groups: bool = True  # an FP32 layer's group (the grids that only feed it) stays float: `float_groups`

    def options(self) -> dict:
        return dataclasses.asdict(self)


def lower_int8(
    raw_int8_onnx: Path, out_onnx: Path, fold_activations: bool = True, paddle_model_prefix: Path | None = None,
    absorb_affines: bool = True, hardswish_in_integers: bool = True, weight_bits: int = 8,
    hardswish_grids: bool = False, float_groups: bool = True,
) -> LoweringResult:
    """Re-encode paddle2onnx's INT8 model (PaddleSlim's scales) as uint8/int8 QDQ onnxruntime fuses.

    With `fold_activations=False` every activation is Paddle's int8 shifted by 128 and the model
    reproduces paddle2onnx's arithmetic; with `fold_activations=True` (default) a ReLU/ReLU6 after a
    quantized op is applied by that op's output quantization (see `folded_activations`): one
    rounding instead of two and no float ReLU between integer ops, which is what lets Conv+ReLU
    chains run at integer speed. `paddle_model_prefix`, the PaddleSlim model paddle2onnx converted,
    supplies the scales of linear layers paddle2onnx dropped (see `paddle_program_scales`).
    `absorb_affines` and `hardswish_in_integers` switch the two backbone rewrites (on by default; off
    only to measure what each gains). `weight_bits=7` requantizes the conv/matmul weights to [-64, 63] for
    CPUs whose u8 x s8 kernels saturate (`weight_range.onnxruntime_weight_bits` decides it for a CPU).
    `hardswish_grids` rebuilds the grid of an affine after a HardSwish that no other absorption takes (see
    `affine_absorption`): off by default, measured in benchmarks/lowering_patterns.py. `float_groups` leaves float
    the grids that only feed a layer PaddleSlim left in FP32 (`float_groups.without_feeding_grids`): on by default,
    off only to measure what a bare skip list does.

    Raises:
        ConversionError: the model's Q/DQ pattern is not understood, or onnxruntime's quantizer
            needed a scale PaddleSlim did not provide, or the result fails onnx.checker.
    """
    program_scales = paddle_program_scales(paddle_model_prefix) if paddle_model_prefix is not None else None
    return lower_int8_model(onnx.load(str(raw_int8_onnx)), out_onnx, program_scales, fold_activations,
                            Path(raw_int8_onnx).name, absorb_affines, hardswish_in_integers, weight_bits,
                            hardswish_grids, float_groups)


def _with_propagated_scales(quantization: PaddleQuantization) -> tuple[PaddleQuantization, PropagatedScales]:
    """PaddleSlim's quantization extended by the scales `propagate_scales` derives, and those derivations."""
    propagated = propagate_scales(quantization.float_model, quantization.activation_scales)
    quantization = dataclasses.replace(
        quantization, activation_scales=propagated.activation_scales,
        quantized_nodes=(*quantization.quantized_nodes, *propagated.lowered_nodes),
        float_nodes_with_quantized_inputs=tuple(name for name in quantization.float_nodes_with_quantized_inputs
                                                if name not in propagated.lowered_nodes))
    return quantization, propagated


def _nodes_to_quantize(quantization: PaddleQuantization, fold_activations: bool, folded: set[str]) -> list[str]:
    """The names handed to the quantizer's nodes_to_quantize, in graph order."""
    return [name for name, node in ((node.name, node) for node in quantization.float_model.graph.node)
            if name in set(quantization.quantized_nodes)
            # onnxruntime drops any quantized Clip; keep those whose bound is not a quantization bound
            and not (fold_activations and node.op_type == "Clip" and node.output[0] not in folded)]


def _quantize_with_paddle_scales(quantization: PaddleQuantization, nodes: list[str], out_onnx: Path,
                                 fold_activations: bool, name: str) -> None:
    """Run onnxruntime's quantize_static on the float graph with every scale overridden by PaddleSlim's."""
    node_types = {node.name: node.op_type for node in quantization.float_model.graph.node}
    ranges = TensorsData(CalibrationMethod.MinMax, {
        # Only PaddleSlim's tensors: the quantizer fails on any other instead of calibrating it itself.
        # The range is informational; the override's scale and zero point are what is used.
        name: (np.float32(-128 * scale), np.float32(127 * scale))
        for name, scale in quantization.activation_scales.items()
    })
    with tempfile.TemporaryDirectory(prefix="quantgate-lower-") as scratch:
        float_path, cache = Path(scratch) / "paddle_float.onnx", Path(scratch) / "paddle_ranges.json"
        onnx.save(quantization.float_model, str(float_path))
        save_tensors_data(ranges, cache)
        quantizer_log = logging.getLogger()
        level = quantizer_log.level
        quantizer_log.setLevel(logging.ERROR)  # the quantizer warns about pre-processing we do not need
        try:
            quantize_static(
                str(float_path), str(out_onnx), calibration_data_reader=None, calibration_cache_path=str(cache),
                quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                per_channel=True, nodes_to_quantize=nodes,
                op_types_to_quantize=sorted({node_types[name] for name in nodes}),
                extra_options={
                    "TensorQuantOverrides": tensor_overrides(quantization, fold_activations),
                    # onnxruntime drops a ReLU only when asked and when its output's zero point is 0
                    "ActivationSymmetric": not fold_activations,
                    "QDQKeepRemovableActivations": not fold_activations,
                    "QDQDisableWeightAdjustForInt32Bias": True,  # keep Paddle's weight scales exactly
                    "OpTypesToExcludeOutputQuantization": float_output_op_types(quantization, nodes),
                },
            )
        except (ValueError, KeyError) as exc:
            raise ConversionError(f"onnxruntime could not lower {name} with PaddleSlim's "
                                  f"scales: {exc}") from exc
        finally:
            quantizer_log.setLevel(level)


def _lowering_metrics(quantization: PaddleQuantization, propagated: PropagatedScales, lowered: onnx.ModelProto,
                      out_onnx: Path, folded: set[str], float_inputs: list[str], shielded: list[str]) -> dict:
    """What the lowering did, for the convert stage's manifest."""
    return {
        "bytes": Path(out_onnx).stat().st_size,
        "paddle_quantized_nodes": len(quantization.quantized_nodes),
        "folded_activations": len(folded),
        "float_nodes_with_quantized_inputs": list(quantization.float_nodes_with_quantized_inputs),
        "float_layers": list(quantization.float_layers),
        "float_layers_reading_float_inputs": float_inputs,
        "float_layers_shielded_from_onnxruntime_weight_quantization": shielded,
        "paddle_activation_scales": len(quantization.activation_scales) - len(propagated.derived_from),
        "derived_activation_scales": propagated.derived_from,
        "paddle_weight_scales": len(quantization.weight_scales),
        "per_channel_weights": sum(axis is not None for _, axis in quantization.weight_scales.values()),
        "activation_encoding": f"uint8, zero point {UINT8_ZERO_POINT} (Paddle's symmetric int8 + 128); "
                               "ReLU/ReLU6 outputs folded: uint8, zero point 0, scale 127/255 x Paddle's",
        **integer_op_counts(lowered),
    }


def lower_int8_model(raw: onnx.ModelProto, out_onnx: Path, program_scales: WeightScales | None = None,
                     fold_activations: bool = True, name: str = "the model",
                     absorb_affines: bool = True, hardswish_in_integers: bool = True,
                     weight_bits: int = 8, hardswish_grids: bool = False,
                     float_groups: bool = True) -> LoweringResult:
    """`lower_int8` on a loaded paddle2onnx model and PaddleSlim's program scales (`paddle_program_scales`)."""
    if weight_bits not in (7, 8):
        raise ValueError(f"weight_bits must be 7 or 8, not {weight_bits!r}")
    quantization, propagated = _with_propagated_scales(read_paddle_quantization(raw, program_scales))
    if float_groups:
        quantization, grids = without_feeding_grids(quantization)
    folded = set(folded_activations(quantization)) if fold_activations else set()
    nodes = _nodes_to_quantize(quantization, fold_activations, folded)
    if not nodes:
        raise ConversionError(f"{name} has no node PaddleSlim quantized; nothing to lower")
    _quantize_with_paddle_scales(quantization, nodes, out_onnx, fold_activations, name)
    lowered = _drop_zero_bias_zero_points(onnx.load(str(out_onnx)))
    absorbed = absorb_scalar_affines(lowered, hardswish_grids) if absorb_affines else None
    hardswishes = integer_hardswish(lowered) if hardswish_in_integers else 0
    float_graph = quantization.float_model.graph
    producers = {node.output[0]: node for node in float_graph.node if node.output}
    float_inputs = read_float_inputs(lowered, set(quantization.float_layers),
                                     {output: producers[output] for output in folded},
                                     {init.name: init for init in float_graph.initializer})
    shielded = shield_from_weight_quantization(lowered)
    reduced = reduce_weight_range(lowered) if weight_bits == 7 else 0
    onnx.save(lowered, str(out_onnx))
    try:
        onnx.checker.check_model(lowered, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"the lowered INT8 model fails onnx.checker: {exc}") from exc
    metrics = _lowering_metrics(quantization, propagated, lowered, out_onnx, folded, float_inputs, shielded)
    metrics["absorbed_affines"] = absorbed.as_metrics() if absorbed is not None else None
    metrics["integer_hardswish"] = hardswishes
    metrics["weight_bits"], metrics["reduced_range_weights"] = weight_bits, reduced
    metrics["float_group_grids"] = grids if float_groups else None
    return LoweringResult(metrics=metrics)
