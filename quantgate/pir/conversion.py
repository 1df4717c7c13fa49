"""A PIR program to a checked FP32 ONNX model with paddle2onnx 2.x.

paddle2onnx 2.x logs and swallows its own exceptions and has written wrong `epsilon` attributes in some runs
(Paddle2ONNX #1646), so what it writes is trusted only once it exists, passes onnx.checker and gives Paddle's own
outputs on the data's first calibration samples. What it cannot read is patched in a copy of the program and the
patch proven on the same samples (Paddle on the original against Paddle on the copy), or refused naming the op.

What it writes is normalised into paddle2onnx 1.3.1's shapes (quantgate.int8.onnx_normalise) before any check, so the
model checked, compared with Paddle and kept is the one quantize calibrates and convert lowers: 2.1.0's own graph
of some models (the PP-OCRv4 rec translated to PIR: a Concat of rank-0 and rank-1 shape pieces) fails onnx.checker
and cannot even be loaded by onnxruntime, and the lowering's pattern rewrites match only 1.3.1's shapes.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import DecodeError

from quantgate.int8.errors import ConversionError
from quantgate.int8.onnx_normalise import normalise_file
from quantgate.pir.children import ChildFailed, convert_to_onnx, paddle_outputs
from quantgate.pir.converter import find_converter
from quantgate.pir.errors import ConversionRefused
from quantgate.pir.folder import PirFolder, program_ops, require_pir_program

log = logging.getLogger(__name__)

# ONNX against Paddle, both FP32 on the same CPU: PP-OCRv5 mobile rec 6e-6, det 1e-7 (max abs, softmax/sigmoid).
ABS_TOLERANCE = 1e-4
REL_TOLERANCE = 1e-4  # of the largest magnitude Paddle outputs (logits are not bounded by 1)
FLOAT64 = "0.a_f64"
FLOAT32 = "0.a_f32"


def float64_interp_scales(program: dict) -> tuple[dict, list[str]]:
    """A copy of the program whose `*_interp` ops' `scale` arrays are float32, and the ops changed.

    Paddle 3.3.1 saves some `nearest_interp` scales as float64 (e.g. a legacy PP-OCRv4 detector translated to PIR);
    paddle2onnx 2.1.0 reads only float32 there ("0th elementwise MUST be ir::FloatAttribute", pir_parser.cc).
    """
    patched, changed = copy.deepcopy(program), []
    for index, op in enumerate(program_ops(patched)):
        if not op["#"].endswith("_interp"):
            continue
        for attribute in op.get("A", []):
            values = attribute.get("AT", {}) if isinstance(attribute, dict) else {}
            if attribute.get("N") == "scale" and values.get("#") == "0.a_array":
                doubles = [item for item in values["D"] if item.get("#") == FLOAT64]
                for item in doubles:
                    item["#"] = FLOAT32
                if doubles:
                    changed.append(f"{op['#'].split('.', 1)[-1]} #{index} (scale {[item['D'] for item in doubles]})")
    return patched, changed


def _difference(onnx_outputs: np.ndarray, paddle: np.ndarray) -> tuple[float, float]:
    limit = ABS_TOLERANCE + REL_TOLERANCE * float(np.abs(paddle).max(initial=0.0))
    if onnx_outputs.shape != paddle.shape:
        return float("inf"), limit
    return float(np.abs(onnx_outputs.astype(np.float64) - paddle).max(initial=0.0)), limit


def onnx_outputs(onnx_file: Path, inputs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: inputs})[0]


def _refuse(onnx_file: Path, message: str) -> ConversionRefused:
    Path(onnx_file).unlink(missing_ok=True)
    return ConversionRefused(message)


def _patched_program(pir: PirFolder, scratch: Path, check_inputs: np.ndarray,
                     reference: np.ndarray) -> tuple[Path, list[str]]:
    """The program paddle2onnx reads: the folder's own, or a patched copy proven equal on `check_inputs`.

    Raises:
        ConversionRefused: the patched copy's outputs are not the original's (the ops are named).
    """
    patched, changed = float64_interp_scales(require_pir_program(pir.program))
    if not changed:
        return pir.program, []
    copy_file = Path(scratch) / pir.program.name
    copy_file.write_text(json.dumps(patched, ensure_ascii=False), encoding="utf-8")
    outputs, _ = paddle_outputs(copy_file, pir.params, check_inputs)
    difference = float(np.abs(outputs.astype(np.float64) - reference).max(initial=0.0)) \
        if outputs.shape == reference.shape else float("inf")
    if difference != 0.0:
        raise ConversionRefused(f"{pir.program} stores float64 interpolation scales paddle2onnx 2.x cannot read "
                                f"({'; '.join(changed[:5])}); as float32 they change Paddle's outputs by "
                                f"{difference:.3g}, so the model is not converted: export it again with float32 "
                                "scales (e.g. scale_factor=2.0 given as a Python float to F.interpolate)")
    log.info("pir: %d interpolation op(s) read with float32 scales (%s); Paddle's outputs unchanged", len(changed),
             "; ".join(changed[:5]))
    return copy_file, changed


def convert_fp32(pir: PirFolder, onnx_file: Path, check_inputs: np.ndarray, opset: int) -> dict:
    """Convert the PIR model to `onnx_file`, normalised into 1.3.1's shapes, and prove it: the file exists, passes
    onnx.checker, and gives Paddle Inference's FP32 outputs on `check_inputs` (the data's first calibration
    samples). Returns the record (the normaliser's rewrite counts under "normalised").

    Raises:
        ConverterMissing: paddle2onnx 2.x is not installed (the install line is named).
        ConversionRefused: paddle2onnx aborted, wrote nothing or an invalid model, its model cannot be normalised,
            or its outputs differ from Paddle's; `onnx_file` is not left behind.
        PirProblem: Paddle Inference cannot run the program on the samples.
    """
    converter = find_converter()
    onnx_file = Path(onnx_file)
    check_inputs = np.ascontiguousarray(check_inputs, np.float32)
    reference, paddle_run = paddle_outputs(pir.program, pir.params, check_inputs)
    with tempfile.TemporaryDirectory(prefix=".quantgate-pir-convert-", dir=onnx_file.parent) as scratch:
        program, patches = _patched_program(pir, Path(scratch), check_inputs, reference)
        written = Path(scratch) / "model.onnx"
        done = convert_to_onnx(program, pir.params, written, opset, converter, Path(scratch))
        what = f"paddle2onnx {converter.version} ({converter.folder}) converting {pir.program}"
        if isinstance(done, ChildFailed):
            raise _refuse(onnx_file, f"{what} exited {done.returncode}; nothing was stored:\n{done.tail}")
        if not written.is_file() or written.stat().st_size == 0:
            raise _refuse(onnx_file, f"{what} wrote {'an empty file' if written.is_file() else 'no file'} and "
                          "exited 0 (it logs and swallows its errors); nothing was stored. Run it by hand with "
                          "verbose=True to see the op it failed on")
        try:
            normalised = normalise_file(written, written)
        except (ConversionError, DecodeError, onnx.checker.ValidationError, onnx.shape_inference.InferenceError,
                ValueError) as exc:  # DecodeError: not an ONNX file at all
            raise _refuse(onnx_file, f"{what}: its graph cannot be brought to paddle2onnx 1.3.1's shapes, which "
                          f"quantize's calibration and convert's lowering read ({exc}); nothing was stored. Report "
                          "the model with this message") from exc
        try:
            onnx.checker.check_model(str(written), full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as exc:
            raise _refuse(onnx_file, f"{what} wrote a model that fails onnx.checker ({exc}); nothing was stored") \
                from exc
        converted = onnx_outputs(written, check_inputs)
        difference, limit = _difference(converted, reference)
        if not difference <= limit:
            raise _refuse(onnx_file, f"{what}: the ONNX model's outputs differ from Paddle Inference's FP32 outputs by "
                          f"{difference:.3g} (limit {limit:.3g}; shapes {list(converted.shape)} and "
                          f"{list(reference.shape)}) on the first {len(check_inputs)} calibration sample(s); nothing "
                          "was stored. A wrong epsilon attribute (Paddle2ONNX #1646) gives this: run again, and "
                          "report the model to Paddle2ONNX if it repeats")
        os.replace(written, onnx_file)
    graph = onnx.load(str(onnx_file)).graph
    ops: dict[str, int] = {}
    for node in graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return {
        "converter": converter.record(), "opset": opset, "program": pir.program.name,
        "patches": patches, "normalised": normalised, "bytes": onnx_file.stat().st_size, "nodes": len(graph.node),
        "ops": dict(sorted(ops.items())),
        "check_vs_paddle": {"samples": len(check_inputs), "max_abs_diff": difference,
                            "max_abs_diff_limit": limit, "paddle_inference": paddle_run},
    }
