"""Paddle Inference's FP32 numbers for a PIR model, whose INT8 Paddle Inference cannot judge.

A PIR program has no Paddle INT8 program (quantgate calibrated its INT8 on the ONNX graph), so the gate finds Paddle
Inference "not applicable" to it. Its FP32 program still runs there, and a team that serves FP32 from Paddle
Inference today wants to know that the ONNX FP32 model quantgate judged reads the test split as Paddle does. This
pass reads the split once more through `PirPaddleRunner` (a child process) and records Paddle's FP32 scores, how
often its predictions equal the primary runtime's FP32 ones, and how it ran (oneDNN, or off and why). The record is
informational: the gate reads no criterion from it. Paddle failing to run is recorded, never fatal: the ONNX
models were already checked against Paddle's outputs in the export stage.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from quantgate.errors import clipped
from quantgate.pir.errors import PirProblem
from quantgate.pir.paddle_runner import PirPaddleRunner
from quantgate.progress import Progress
from quantgate.samples.reading import StoredData
from quantgate.stages.export.outputs import PARAMS_FILE, PIR_MODEL_FILE

log = logging.getLogger(__name__)


def paddle_fp32_record(folder, data: StoredData, batch_size: int, num_workers: int, primary: str,
                       primary_fp32: np.ndarray) -> dict:
    """Paddle Inference's FP32 reading of the test split by the PIR program in `folder` (the export stage's):
    the task's scores, the share of samples predicted exactly as `primary`'s FP32 model did, and how it ran; or
    {"ran": False, "why": ...} when Paddle cannot run it."""
    task, references = data.task, data.references("test")
    runner = PirPaddleRunner(Path(folder) / PIR_MODEL_FILE, Path(folder) / PARAMS_FILE)
    progress = Progress(log, "evaluate Paddle Inference FP32 (PIR) batch", math.ceil(data.size("test") / batch_size),
                        every_s=5.0)
    predicted = []
    try:
        for step, (images, labels) in enumerate(data.batches("test", batch_size, num_workers), start=1):
            predicted.append(task.predict(runner(images), labels))
            progress.step(step)
    except PirProblem as problem:
        log.info("evaluate: Paddle Inference FP32 of the PIR program did not run: %s", str(problem).splitlines()[0])
        return {"ran": False, "why": clipped(str(problem), 1500)}
    finally:
        how = runner.how_it_ran()
        runner.close()
    paddle = np.concatenate(predicted)
    scores = task.scores(references, paddle)
    record = {"ran": True, "model": runner.form.description, **scores, "compared_with": f"{primary} fp32",
              "same_prediction_pct": float(np.mean(paddle == primary_fp32) * 100.0), **how}
    if not how.get("onednn", True):
        record["note"] = f"oneDNN off: {how.get('onednn_failure')}"
    log.info("evaluate: Paddle Inference FP32 (PIR program) %.2f %%; %.2f %% of samples predicted as %s FP32%s",
             scores["top1_pct"], record["same_prediction_pct"], primary,
             "" if how.get("onednn", True) else " (oneDNN off: an op needs it)")
    return record
