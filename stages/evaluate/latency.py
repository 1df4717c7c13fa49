"""Latency of models in one runtime (onnxruntime, OpenVINO, Paddle Inference), measured in a process of its own.

The pipeline's own process has just trained with Paddle, whose OpenMP workers may still spin on
the same cores, and it may host Prefect's temporary server: timings taken there were measured with
a median 25 % above and a 90th percentile 3x above those of a clean process. So the evaluate stage
runs this module as a child process (`python -m quantgate.stages.evaluate.latency --runtime ...`), one
per runtime, so no other runtime's worker threads share the cores, and reads its JSON.
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

from quantgate.stages.evaluate.forms import ModelForm, open_runner
from quantgate.stages.evaluate.outputs import ONNXRUNTIME, RUNTIME_NAMES
from quantgate.stages.evaluate.runtime_onnxruntime import session  # noqa: F401  (others import it from here)
from quantgate.stages.shared.errors import StageError

WARMUP_RUNS = 3
ROUNDS = 2  # each model is timed in ROUNDS blocks, in turn, so a slow spell of the machine hits both


def measure(models: dict[str, Path], batch: np.ndarray, threads: int, repeats: int, runtime: str = ONNXRUNTIME,
            int8: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Per model: 10th, 50th and 90th percentile wall time (ms) of one call on `batch`, in a fresh process.

    `models`: name -> ONNX file, or Paddle model folder for paddle_inference; `int8`: the names of INT8
    models (Paddle Inference turns its oneDNN INT8 passes on for them).

    Raises:
        StageError: the measuring process failed; its error output is included.
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-latency-") as scratch:
        batch_file = Path(scratch) / "batch.npy"
        np.save(batch_file, batch)
        command = [sys.executable, "-m", "quantgate.stages.evaluate.latency", "--runtime", runtime,
                   "--batch", str(batch_file), "--threads", str(threads), "--repeats", str(repeats),
                   *[f"--int8={name}" for name in int8], *[f"{name}={path}" for name, path in models.items()]]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StageError(f"the latency measurement process ({' '.join(command[:3])}) failed with exit "
                         f"{done.returncode}; its error output:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def time_in_this_process(models: dict[str, Path], batch: np.ndarray, threads: int, repeats: int,
                         runtime: str = ONNXRUNTIME, int8: tuple[str, ...] = ()) -> dict:
    runners = {name: open_runner(runtime, ModelForm(Path(path), name in int8, name, ""), threads, batch.shape)
               for name, path in models.items()}
    timings: dict[str, list[float]] = {name: [] for name in runners}
    per_block = max(1, repeats // ROUNDS)
    for _ in range(ROUNDS):
        # One block per model: interleaving single calls would time one model while the other's
        # worker threads still spin-wait on the same cores.
        for name, run in runners.items():
            for _ in range(WARMUP_RUNS):
                run(batch)
            for _ in range(per_block):
                started = time.perf_counter()
                run(batch)
                timings[name].append((time.perf_counter() - started) * 1e3)
    return {name: {"p10": float(np.percentile(values, 10)), "p50": float(np.median(values)),
                   "p90": float(np.percentile(values, 90)), "runs": len(values)}
            for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=RUNTIME_NAMES, default=ONNXRUNTIME)
    parser.add_argument("--batch", type=Path, required=True, help=".npy file with the input batch")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--int8", action="append", default=[], metavar="NAME", help="an INT8 model's name")
    parser.add_argument("models", nargs="+", metavar="NAME=PATH")
    args = parser.parse_args()
    models = {name: Path(path) for name, _, path in (item.partition("=") for item in args.models)}
    batch = np.load(args.batch, allow_pickle=False)
    print(json.dumps(time_in_this_process(models, batch, args.threads, args.repeats, args.runtime, tuple(args.int8))))


if __name__ == "__main__":
    main()
