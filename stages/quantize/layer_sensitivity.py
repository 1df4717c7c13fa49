"""Which quantized layers cost the most accuracy, and what leaving some in FP32 would give back.

A layer left in FP32 has PaddleSlim's float weight (BatchNorm folded in by paddle2onnx) and reads
its input's float value; everything else keeps the base calibration's scales, because PaddleSlim
calibrates each tensor on the FP32 model, independently of what else is quantized. So one extra
PaddleSlim run with every layer skipped supplies every layer's float weight, and a model with any
set of layers in FP32 can be assembled from the base calibration's paddle2onnx model without
another PaddleSlim run: swap those weights in, drop their PaddleSlim scales, lower it as the
convert stage does (`lower_int8_model`) and score it on the validation split (about a second for
MobileNetV2, where a PaddleSlim run takes half a minute). `FallbackEstimator` does that; the
search ranks layers with it (drop-one-layer, as NNCF's accuracy control does) and uses it to pick
how many to fall back before it runs the real PaddleSlim trial that confirms the choice.

A fall-back reverts a *group*: the layer and the grids that only feed it (`quantgate.int8.float_groups`). The
lowering drops those grids wherever a layer is FP32, in the real trial and in the estimate alike, so the
estimate needs no more than the float weights; `FallbackEstimator.group_grids` names them.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from quantgate.int8.float_groups import feeding_grids
from quantgate.int8.lower_int8 import Lowering, lower_int8, lower_int8_model
from quantgate.int8.onnx_conversion import to_onnx
from quantgate.int8.paddle_quantization import LAYER_OPS, paddle_program_scales, read_paddle_quantization
from quantgate.int8.scale_propagation import propagate_scales
from quantgate.progress import live
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.quantize.validation_check import ValidationCheck

log = logging.getLogger(__name__)

BN_FUSED_PREFIX = "ConvBnFusion_W_"  # how onnxruntime names a weight its Conv+BatchNormalization fusion made


def lowered_model(calibration_dir: Path, out_onnx: Path, lowering: Lowering = Lowering()) -> Path:
    """PaddleSlim's model in `calibration_dir`, converted and lowered into `out_onnx` as the convert
    stage does it (`lowering`); returns paddle2onnx's model, written beside it, that was lowered."""
    raw = out_onnx.with_name(out_onnx.stem + ".paddle2onnx.onnx")
    to_onnx(Path(calibration_dir) / MODEL_FILE, Path(calibration_dir) / PARAMS_FILE, raw)
    lower_int8(raw, out_onnx, paddle_model_prefix=Path(calibration_dir) / Path(MODEL_FILE).stem,
               **lowering.options())
    return raw


def _renamed(tensor: onnx.TensorProto, name: str) -> onnx.TensorProto:
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = name
    return copy


def _weight_grids(model: onnx.ModelProto) -> dict[str, tuple[np.ndarray, int | None]]:
    """Each weight's int8 step in paddle2onnx's model (its QuantizeLinear's scale, BatchNorm folded in)."""
    tensors = _weight_tensors(model)
    grids = {}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in tensors and node.input[1] in tensors:
            scales = numpy_helper.to_array(tensors[node.input[1]]).ravel()
            axis = next((attr.i for attr in node.attribute if attr.name == "axis"), 1)
            grids[node.input[0]] = (scales, axis if scales.size > 1 else None)
    return grids


def _weight_tensors(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """paddle2onnx's constants (Constant nodes and initializers), by name."""
    tensors = {init.name: init for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensors[node.output[0]] = node.attribute[0].t
    return tensors


def float_weights(float_calibration: Path) -> dict[str, list[tuple[onnx.TensorProto, onnx.TensorProto | None]]]:
    """Candidate float (weight, bias) per layer from PaddleSlim's model with every layer skipped.

    paddle2onnx folds a BatchNorm into the convolution before it only in some patterns (not when
    the layer's input is unquantized, as it is with every layer skipped in a plain conv-BN-ReLU
    chain); where it does not, onnxruntime fuses them when it loads the model. So each layer gets
    two candidates: paddle2onnx's weight (its bias unchanged), and the weight and bias onnxruntime's
    Conv+BatchNormalization fusion produces, exactly what it runs for the real skip.
    `FallbackEstimator` keeps the one the INT8 weight is a rounding of, and none if neither is.
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-float-weights-") as scratch:
        raw, fused = Path(scratch) / "float.onnx", Path(scratch) / "float_bn_fused.onnx"
        to_onnx(Path(float_calibration) / MODEL_FILE, Path(float_calibration) / PARAMS_FILE, raw)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(fused)
        ort.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
        fused_model = onnx.load(str(fused))
        paddle2onnx, onnxruntime = _weight_tensors(onnx.load(str(raw))), _weight_tensors(fused_model)
    candidates = {name: [(tensor, None)] for name, tensor in paddle2onnx.items()}
    for node in fused_model.graph.node:
        if node.op_type == "Conv" and len(node.input) > 2 and node.input[1].startswith(BN_FUSED_PREFIX):
            candidates.setdefault(node.input[1].removeprefix(BN_FUSED_PREFIX), []).append(
                (onnxruntime[node.input[1]], onnxruntime.get(node.input[2])))
    return candidates


def _layer_nodes(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Conv/MatMul/Gemm nodes by the weight they read (directly or through paddle2onnx's Q/DQ pair)."""
    producers = {output: node for node in graph.node for output in node.output}
    nodes = {}
    for node in graph.node:
        if node.op_type in LAYER_OPS and len(node.input) > 1:
            weight = node.input[1]
            while weight in producers and producers[weight].op_type in ("QuantizeLinear", "DequantizeLinear"):
                weight = producers[weight].input[0]
            nodes[weight] = node
    return nodes


class FallbackEstimator:
    """Validation scores of a base calibration with chosen layers in FP32, without PaddleSlim runs."""

    def __init__(self, base_paddle2onnx: Path, base_calibration: Path, floats: dict[str, list[tuple]],
                 check: ValidationCheck, layers: Iterable[str], lowering: Lowering = Lowering()):
        """`floats`: `float_weights` of PaddleSlim's model with every one of `layers` skipped; `lowering`: as the
        trials are lowered."""
        self.base = onnx.load(str(base_paddle2onnx))
        self.scales = paddle_program_scales(Path(base_calibration) / Path(MODEL_FILE).stem)
        self.check, self.lowering = check, lowering
        base = _weight_tensors(self.base)
        grid = _weight_grids(self.base)
        self.float_weights, self.float_biases = {}, {}
        for layer in layers:
            matching = [(weight, bias) for weight, bias in floats.get(layer, []) if layer in base and
                        self._rounds_to(weight, base[layer], grid.get(layer, self.scales.get(layer)))]
            if matching:
                weight, bias = matching[0]
                self.float_weights[layer] = _renamed(weight, layer)
                if bias is not None:
                    self.float_biases[layer] = _renamed(bias, f"{layer}.fp32_fallback_bias")

    @staticmethod
    def _rounds_to(float_weight: onnx.TensorProto, int8_weight: onnx.TensorProto, grid) -> bool:
        """Whether the base calibration's weight is this float weight rounded to its int8 grid (so the
        weight is the one PaddleSlim's skip would give, BatchNorm folded the same way)."""
        if grid is None or list(float_weight.dims) != list(int8_weight.dims):
            return False
        values, rounded = numpy_helper.to_array(float_weight), numpy_helper.to_array(int8_weight)
        scales, axis = grid
        if axis is not None:
            shape = [1] * values.ndim
            shape[axis] = -1
            scales = scales.reshape(shape)
        return bool(np.all(np.abs(values - rounded) <= 0.5 * scales * 1.001 + 1e-12))

    def model(self, float_layers: Iterable[str], out_onnx: Path) -> Path:
        """The lowered INT8 model with `float_layers` (all in `float_weights`) in FP32, written to `out_onnx`."""
        float_layers = set(float_layers)
        if float_layers - set(self.float_weights):
            raise ValueError(f"no estimate for {sorted(float_layers - set(self.float_weights))}: not estimable")
        raw = onnx.ModelProto()
        raw.CopyFrom(self.base)
        for init in raw.graph.initializer:
            if init.name in float_layers:
                init.CopyFrom(self.float_weights[init.name])
        for node in raw.graph.node:
            if node.op_type == "Constant" and node.output[0] in float_layers:
                node.attribute[0].t.CopyFrom(self.float_weights[node.output[0]])
        layer_nodes = _layer_nodes(raw.graph)
        for layer in float_layers & set(self.float_biases):
            node = layer_nodes[layer]  # onnxruntime's BatchNorm fusion: its bias with its weight
            raw.graph.initializer.append(self.float_biases[layer])
            if len(node.input) > 2:
                node.input[2] = self.float_biases[layer].name
            else:
                node.input.append(self.float_biases[layer].name)
        scales = {name: value for name, value in self.scales.items() if name not in float_layers}
        lower_int8_model(raw, out_onnx, scales, name="the fall-back estimate", **self.lowering.options())
        return out_onnx

    def group_grids(self, layer: str) -> list[str]:
        """The activation grids `layer`'s FP32 fall-back drops with it (its group, besides the layer), read off the
        base model as the lowering reads them; empty where the lowering leaves them (`Lowering.float_groups` off)."""
        if not self.lowering.float_groups:
            return []
        quantization = read_paddle_quantization(
            self.base, {name: value for name, value in self.scales.items() if name != layer})
        scales = propagate_scales(quantization.float_model, quantization.activation_scales).activation_scales
        return feeding_grids(quantization.float_model.graph, (layer,), scales).get(layer, [])

    def score(self, float_layers: Iterable[str]) -> dict:
        """Validation scores with `float_layers` in FP32. No images are held here: `ValidationCheck` streams
        the validation split batch by batch for every score."""
        with tempfile.TemporaryDirectory(prefix="quantgate-estimate-") as scratch:
            return self.check.score(self.model(float_layers, Path(scratch) / "estimate.onnx"))


def rank_layers(layers: list[str], score_without: Callable[[str], dict | None], baseline: dict,
                deadline: float) -> tuple[list[dict], str]:
    """`layers` (weight names), most sensitive first, and how complete the ranking is.

    `score_without(layer)` is the validation score with `layer` in FP32 (its "measured_by" says how:
    "estimate" or "paddleslim"), or None where that fall-back cannot be built (the layer is then not
    measured); `baseline` the score with every layer quantized. A layer's
    sensitivity is how much closer to FP32 (relative logit error) the model gets without its
    quantization. Layers not measured before `deadline` (time.monotonic) rank last and are never
    fallen back.
    """
    ranking, measured = [], 0
    # The first and last layers (image in, logits out) are the usual suspects: measured first, so that
    # a ranking cut short by the deadline still covers them.
    order = list(dict.fromkeys([*layers[:1], *layers[-1:], *layers]))
    for index, layer in enumerate(order):
        if time.monotonic() >= deadline:
            ranking += [{"layer": name, "measured": False} for name in order[index:]]
            break
        without = score_without(layer)
        if without is None:  # its fall-back could not be built: never fallen back
            ranking.append({"layer": layer, "measured": False, "unbuildable": True})
            continue
        measured += 1
        ranking.append({
            "layer": layer,
            "measured": True,
            "logit_error_removed": baseline["logit_error"] - without["logit_error"],
            "accuracy_pts_recovered": without["int8_top1_pct"] - baseline["int8_top1_pct"],
            "agreement_recovered": without["agreement"] - baseline["agreement"],
            "measured_by": without.get("measured_by", "estimate"),
        })
    ranking.sort(key=lambda entry: (not entry["measured"], -entry.get("logit_error_removed", 0.0),
                                    -entry.get("accuracy_pts_recovered", 0.0), entry["layer"]))
    live(log, "search: ranked %d of %d layers by sensitivity; most sensitive: %s", measured, len(layers),
              ", ".join(entry["layer"] for entry in ranking[:3]))
    complete = "complete" if measured == len(layers) else f"{measured} of {len(layers)} layers before the timeout"
    return ranking, complete
