"""Every Paddle load of a PIR program runs here, in a child process: Paddle reads `FLAGS_enable_pir_api` once, at
import, and this process keeps it off for PaddleSlim (quantgate/__init__.py). Arrays travel as .npy files in a
scratch folder; each child writes one JSON result.

- `paddle_outputs`: Paddle Inference's FP32 outputs (oneDNN first; off where an op needs it, said in the result);
- `convert_to_onnx`: paddle2onnx 2.x's `export`, from the converter's own folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.errors import clipped
from quantgate.pir.converter import Converter
from quantgate.pir.errors import PirProblem

CHILD_TIMEOUT_S = 900
TAIL_CHARS = 1500

PADDLE_RUN = r"""
import json, sys
import numpy as np
import paddle.inference as inference

program, params, inputs_file, outputs_file, result_file = sys.argv[1:6]
inputs = np.load(inputs_file)

def run(onednn):
    config = inference.Config(program, params)
    config.enable_mkldnn() if onednn else config.disable_mkldnn()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(list(inputs.shape))
    handle.copy_from_cpu(inputs)
    predictor.run()
    return predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()

result = {"onednn": True}
try:
    outputs = run(True)
except Exception as exc:  # e.g. NotImplementedError on ArrayAttribute<DoubleAttribute> (PP-OCRv5 mobile det)
    result = {"onednn": False, "onednn_failure": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
    outputs = run(False)
np.save(outputs_file, outputs)
result["output_shape"] = list(outputs.shape)
with open(result_file, "w") as stream:
    json.dump(result, stream)
"""

CONVERT = r"""
import json, sys
import paddle2onnx

program, params, onnx_file, opset, result_file = sys.argv[1:6]
# optimize_tool "None": the default "polygraphy" sets POLYGRAPHY_AUTOINSTALL_DEPS=1 (a download at run time).
paddle2onnx.export(model_filename=program, params_filename=params, save_file=onnx_file, opset_version=int(opset),
                   enable_onnx_checker=True, optimize_tool="None")
with open(result_file, "w") as stream:
    json.dump({"version": paddle2onnx.__version__, "module": paddle2onnx.__file__}, stream)
"""


@dataclass(frozen=True)
class ChildFailed:
    returncode: int
    tail: str


def run_child(script: str, args: list[str], scratch: Path, converter: Converter | None = None) -> dict | ChildFailed:
    """Run `script` with `args` in a child Python with FLAGS_enable_pir_api=1 (and the converter's folder first on
    its path); its JSON result, or how it failed (exit status and the end of its output)."""
    result_file = Path(scratch) / "result.json"
    result_file.unlink(missing_ok=True)
    env = {**os.environ, "FLAGS_enable_pir_api": "1"}
    if converter is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(converter.folder), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", script, *args, str(result_file)], env=env, capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0 or not result_file.is_file():
        return ChildFailed(done.returncode, clipped((done.stderr or "")[-TAIL_CHARS:] + (done.stdout or "")[-500:],
                                                    TAIL_CHARS + 500))
    return json.loads(result_file.read_text())


def paddle_outputs(program: Path, params: Path, inputs: np.ndarray) -> tuple[np.ndarray, dict]:
    """Paddle Inference's FP32 outputs of the PIR program on `inputs`, and how it ran ({"onednn": bool, ...}).

    Raises:
        PirProblem: Paddle cannot load or run the program (its last lines are quoted).
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-pir-") as scratch:
        inputs_file, outputs_file = Path(scratch) / "inputs.npy", Path(scratch) / "outputs.npy"
        np.save(inputs_file, np.ascontiguousarray(inputs, np.float32))
        result = run_child(PADDLE_RUN, [str(program), str(params), str(inputs_file), str(outputs_file)],
                           Path(scratch))
        if isinstance(result, ChildFailed):
            raise PirProblem(f"Paddle Inference cannot run the PIR program {program} on inputs "
                             f"{list(inputs.shape)} (exit {result.returncode}):\n{result.tail}")
        return np.load(outputs_file), result


def convert_to_onnx(program: Path, params: Path, onnx_file: Path, opset: int, converter: Converter,
                    scratch: Path) -> dict | ChildFailed:
    """paddle2onnx 2.x's export of the PIR program into `onnx_file`: its {"version", "module"}, or how it failed.
    paddle2onnx logs and swallows its own exceptions: the caller checks the file it wrote."""
    return run_child(CONVERT, [str(program), str(params), str(onnx_file), str(opset)], scratch, converter)
