"""Latency of ONNX models in onnxruntime, measured in a process of its own.

The pipeline's own process has just trained with Paddle, whose OpenMP workers may still spin on
the same cores, and it may host Prefect's temporary server: timings taken there were measured with
a median 25 % above and a 90th percentile 3x above those of a clean process. So the evaluate stage
runs this module as a child process (`python -m quantgate.stages.evaluate.latency`) and reads its JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from quantgate.stages.shared.errors import StageError

WARMUP_RUNS = 3
ROUNDS = 2  # each model is timed in ROUNDS blocks, in turn, so a slow spell of the machine hits both


def session(onnx_file: Path, threads: int) -> ort.InferenceSession:
    """A CPU session with a fixed thread count, so latencies of the two models compare."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])


def measure(models: dict[str, Path], batch: np.ndarray, threads: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per model: 10th, 50th and 90th percentile wall time (ms) of one call on `batch`, in a fresh process.

    Raises:
        StageError: the measuring process failed; its error output is included.
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-latency-") as scratch:
        batch_file = Path(scratch) / "batch.npy"
        np.save(batch_file, batch)
        command = [sys.executable, "-m", "quantgate.stages.evaluate.latency", "--batch", str(batch_file),
                   "--threads", str(threads), "--repeats", str(repeats),
                   *[f"{name}={path}" for name, path in models.items()]]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StageError(f"the latency measurement process ({' '.join(command[:3])}) failed with exit "
                         f"{done.returncode}; its error output:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def time_in_this_process(models: dict[str, Path], batch: np.ndarray, threads: int, repeats: int) -> dict:
    sessions = {name: session(path, threads) for name, path in models.items()}
    timings: dict[str, list[float]] = {name: [] for name in sessions}
    per_block = max(1, repeats // ROUNDS)
    for _ in range(ROUNDS):
        # One block per model: interleaving single calls would time one session while the other's
        # worker threads still spin-wait on the same cores.
        for name, model in sessions.items():
            feed = {model.get_inputs()[0].name: batch}
            for _ in range(WARMUP_RUNS):
                model.run(None, feed)
            for _ in range(per_block):
                started = time.perf_counter()
                model.run(None, feed)
                timings[name].append((time.perf_counter() - started) * 1e3)
    return {name: {"p10": float(np.percentile(values, 10)), "p50": float(np.median(values)),
                   "p90": float(np.percentile(values, 90)), "runs": len(values)}
            for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=Path, required=True, help=".npy file with the input batch")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("models", nargs="+", metavar="NAME=PATH")
    args = parser.parse_args()
    models = {name: Path(path) for name, _, path in (item.partition("=") for item in args.models)}
    batch = np.load(args.batch, allow_pickle=False)
    print(json.dumps(time_in_this_process(models, batch, args.threads, args.repeats)))


if __name__ == "__main__":
    main()
