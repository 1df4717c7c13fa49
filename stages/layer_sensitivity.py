"""Which quantized layers cost the most accuracy: a drop-one-layer analysis on the validation split.

For each layer PaddleSlim quantized, PaddleSlim runs again with that layer in `skip_tensor_list`;
the result is converted and lowered like any INT8 model and scored against FP32 on the validation
split. A layer's sensitivity is how much closer to FP32 (relative logit error) the model gets
without its quantization. It must be a real PaddleSlim run: PaddleSlim saves a quantized layer's
weights already rounded (and BatchNorm folded into them), so a layer's float weights cannot be
recovered from the INT8 model. Each run is a calibration the search caches, so the fall-back trial
for the most sensitive layer, and any rerun, finds it ready. NNCF's accuracy control ranks layers
the same way before reverting them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from quantgate.stages.convert import to_onnx
from quantgate.stages.export import MODEL_FILE, PARAMS_FILE
from quantgate.stages.lower_int8 import lower_int8
from quantgate.stages.validation_check import ValidationCheck

log = logging.getLogger(__name__)


def lowered_model(calibration_dir: Path, out_onnx: Path) -> Path:
    """PaddleSlim's model in `calibration_dir`, converted and lowered into `out_onnx` as the convert
    stage does it; returns paddle2onnx's model, written beside it, that was lowered."""
    raw = out_onnx.with_name(out_onnx.stem + ".paddle2onnx.onnx")
    to_onnx(Path(calibration_dir) / MODEL_FILE, Path(calibration_dir) / PARAMS_FILE, raw)
    lower_int8(raw, out_onnx, paddle_model_prefix=Path(calibration_dir) / Path(MODEL_FILE).stem)
    return raw


def rank_layers(layers: list[str], calibrate: Callable[[tuple[str, ...]], Path], baseline: dict,
                check: ValidationCheck, scratch: Path, deadline: float) -> tuple[list[dict], str]:
    """`layers` (weight names), most sensitive first, and how complete the ranking is.

    `calibrate(skip)` returns PaddleSlim's model with `skip` left float; `baseline` is the validation
    score with every layer quantized. Layers not measured before `deadline` (time.monotonic) rank last
    and are never fallen back.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    ranking, measured = [], 0
    # The first and last layers (image in, logits out) are the usual suspects: measured first, so that
    # a ranking cut short by the deadline still covers them.
    order = list(dict.fromkeys([*layers[:1], *layers[-1:], *layers]))
    for index, layer in enumerate(order):
        if time.monotonic() >= deadline:
            ranking += [{"layer": name, "measured": False} for name in order[index:]]
            break
        lowered = scratch / f"without-{index}.onnx"
        lowered_model(calibrate((layer,)), lowered)
        without = check.score(lowered)
        measured += 1
        ranking.append({
            "layer": layer,
            "measured": True,
            "logit_error_removed": baseline["logit_error"] - without["logit_error"],
            "accuracy_pts_recovered": without["int8_top1_pct"] - baseline["int8_top1_pct"],
            "agreement_recovered": without["agreement"] - baseline["agreement"],
        })
    ranking.sort(key=lambda entry: (not entry["measured"], -entry.get("logit_error_removed", 0.0),
                                    -entry.get("accuracy_pts_recovered", 0.0), entry["layer"]))
    log.info("search: ranked %d of %d layers by sensitivity; most sensitive: %s", measured, len(layers),
             ", ".join(entry["layer"] for entry in ranking[:3]))
    complete = "complete" if measured == len(layers) else f"{measured} of {len(layers)} layers before the timeout"
    return ranking, complete
