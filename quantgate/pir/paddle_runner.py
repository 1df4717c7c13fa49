"""Paddle Inference's FP32 reading of a PIR program, batch by batch, in one long-lived child process.

The evaluate stage reads the test split once and feeds every runner each batch; this runner is one of them for a
PIR model: Paddle Inference cannot judge its INT8 (there is no Paddle INT8 program) but still reads its FP32. Paddle
loads a PIR program only with `FLAGS_enable_pir_api=1`, which this process keeps off (quantgate/__init__.py), so the
predictor lives in a child started once (Paddle's import and the predictor's build are paid once, not per batch).
Arrays travel as .npy files in a scratch folder; the child answers each batch with one marked line on its stdout
(Paddle's own logging goes to a file). oneDNN first, off where an op needs it (PP-OCRv5 mobile det), as
`quantgate.pir.children.paddle_outputs` does; `how_it_ran()` says which.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from quantgate.pir.children import TAIL_CHARS
from quantgate.pir.errors import PirProblem
from quantgate.runtimes.forms import ModelForm

MARK = "QUANTGATE-PIR "
# Samples per predictor run: bounds the child's memory whatever the evaluate batch (a detector's 960x960 pages).
CHUNK = 4

SERVE = r"""
import json, sys
import numpy as np
import paddle.inference as inference

program, params, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
MARK = "QUANTGATE-PIR "

def predictor(onednn):
    config = inference.Config(program, params)
    config.enable_mkldnn() if onednn else config.disable_mkldnn()
    config.disable_glog_info()
    return inference.create_predictor(config)

def run(predictor, inputs):
    outputs = []
    for start in range(0, len(inputs), chunk):
        part = np.ascontiguousarray(inputs[start:start + chunk])
        handle = predictor.get_input_handle(predictor.get_input_names()[0])
        handle.reshape(list(part.shape))
        handle.copy_from_cpu(part)
        predictor.run()
        outputs.append(predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu())
    return np.concatenate(outputs)

how, current = {"onednn": True}, None
for line in sys.stdin:
    inputs_file, outputs_file = line.split()
    inputs = np.load(inputs_file)
    try:
        if current is None:
            try:
                current = predictor(True)
                outputs = run(current, inputs)
            except Exception as exc:  # e.g. ArrayAttribute<DoubleAttribute> (PP-OCRv5 mobile det)
                how = {"onednn": False, "onednn_failure":
                       f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"}
                current = predictor(False)
                outputs = run(current, inputs)
        else:
            outputs = run(current, inputs)
        np.save(outputs_file, outputs)
        print(MARK + json.dumps(how), flush=True)
    except Exception as exc:
        print(MARK + json.dumps({"error": f"{type(exc).__name__}: {str(exc).strip()[-600:]}"}), flush=True)
"""


class PirPaddleRunner:
    """`runner(images) -> outputs`: Paddle Inference FP32 on a PIR program (`program`: its .json) and `params`."""

    def __init__(self, program: Path, params: Path, stage: str = "export"):
        program, params = Path(program), Path(params)
        self.program = program
        self.form = ModelForm(program.parent, False, f"{stage}'s FP32 PIR program (Paddle Inference, in a child "
                              "process)", stage)
        self._scratch = tempfile.TemporaryDirectory(prefix="quantgate-pir-paddle-")
        scratch = Path(self._scratch.name)
        self._log = scratch / "paddle.log"
        self._how: dict = {}
        with self._log.open("w") as log:
            self._child = subprocess.Popen(
                [sys.executable, "-c", SERVE, str(program), str(params), str(CHUNK)],
                env={**os.environ, "FLAGS_enable_pir_api": "1"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True, bufsize=1)

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """Paddle's FP32 outputs for the batch.

        Raises:
            PirProblem: the child cannot run the batch, or has died (its last lines are quoted).
        """
        scratch = Path(self._scratch.name)
        inputs, outputs = scratch / "inputs.npy", scratch / "outputs.npy"
        np.save(inputs, np.ascontiguousarray(images, np.float32))
        answer = None
        try:
            self._child.stdin.write(f"{inputs} {outputs}\n")
            self._child.stdin.flush()
            for line in self._child.stdout:
                if line.startswith(MARK):
                    answer = json.loads(line[len(MARK):])
                    break
        except (BrokenPipeError, OSError):
            answer = None
        if answer is None or "error" in answer:
            why = answer["error"] if answer else f"the child exited ({self._child.poll()})"
            raise PirProblem(f"Paddle Inference cannot run the PIR program {self.program} on a batch of "
                             f"{list(images.shape)}: {why}\n{self._tail()}")
        self._how = answer
        return np.load(outputs)

    def how_it_ran(self) -> dict:
        """{"onednn": bool, "onednn_failure": why} once a batch has run; {} before."""
        return dict(self._how)

    def close(self) -> None:
        if self._child.poll() is None:
            with contextlib.suppress(OSError):  # a child that died between the poll and here
                self._child.stdin.close()
            try:
                self._child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._scratch.cleanup()

    def _tail(self) -> str:
        text = self._log.read_text(errors="replace") if self._log.is_file() else ""
        return text[-TAIL_CHARS:]
