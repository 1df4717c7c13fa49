"""Latency of models in one runtime (onnxruntime, OpenVINO, Paddle Inference), measured in a process of its own.

The pipeline's own process has just trained with Paddle, whose OpenMP workers may still spin on
the same cores, and it may host Prefect's temporary server: timings taken there were measured with
a median 25 % above and a 90th percentile 3x above those of a clean process. So the evaluate stage
runs this module as a child process (`python -m quantgate.runtimes.latency --runtime ...`), one
per runtime, so no other runtime's worker threads share the cores, and reads its JSON. One process times
every batch size asked for (the evaluated batch, and batch 1), one after another, the same way.
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

from quantgate.errors import StageError
from quantgate.lifetime import dies_with_us
from quantgate.runtimes.forms import ModelForm, open_runner
from quantgate.runtimes.runtime_onnxruntime import session  # noqa: F401  (others import it from here)
from quantgate.stages.evaluate.outputs import BATCH1, ONNXRUNTIME, RUNTIME_NAMES

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
    return measure_batch_sizes(models, batch, (len(batch),), threads, repeats, runtime, int8)[len(batch)]


def measure_batch_sizes(models: dict[str, Path], batch: np.ndarray, batch_sizes: tuple[int, ...], threads: int,
                        repeats: int, runtime: str = ONNXRUNTIME, int8: tuple[str, ...] = ()
                        ) -> dict[int, dict[str, dict[str, float]]]:
    """{batch size: `measure`'s stats per model} on the first `batch size` images of `batch`, every size timed
    the same way (warm-up, rounds, repeats) in one fresh process, one size after another.

    Raises:
        StageError: the measuring process failed; its error output is included.
    """
    with tempfile.TemporaryDirectory(prefix="quantgate-latency-") as scratch:
        batch_file = Path(scratch) / "batch.npy"
        np.save(batch_file, batch)
        command = [sys.executable, "-m", "quantgate.runtimes.latency", "--runtime", runtime,
                   "--batch", str(batch_file), "--threads", str(threads), "--repeats", str(repeats),
                   *[f"--batch-size={size}" for size in batch_sizes],
                   *[f"--int8={name}" for name in int8], *[f"{name}={path}" for name, path in models.items()]]
        done = subprocess.run(dies_with_us(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StageError(f"the latency measurement process ({' '.join(command[:3])}) failed with exit "
                         f"{done.returncode}; its error output:\n{done.stderr[-2000:]}")
    return {int(size): stats for size, stats in json.loads(done.stdout).items()}


def measure_forms(runtime: str, forms: dict[str, ModelForm], batch: np.ndarray, threads: int, repeats: int,
                  timed: dict | None = None) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """`runtime`'s latencies of every form at len(`batch`) and at batch 1 (BATCH1), in one process of its own.

    `timed`: the latencies at len(`batch`) when they were measured already (onnxruntime's INT8 form trial on AMX
    CPUs); then only batch 1 is measured. With a batch of one image, both are the same measurement.

    Raises:
        StageError: the measuring process failed.
    """
    models = {name: form.path for name, form in forms.items()}
    int8 = tuple(name for name, form in forms.items() if form.int8)
    sizes = (BATCH1,) if timed is not None else tuple(dict.fromkeys((len(batch), BATCH1)))
    measured = measure_batch_sizes(models, batch, sizes, threads, repeats, runtime, int8)
    return (timed if timed is not None else measured[len(batch)]), measured[BATCH1]


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
    parser.add_argument("--batch-size", type=int, action="append", default=[], metavar="N",
                        help="time the batch's first N images (repeatable; default: the whole batch)")
    parser.add_argument("--int8", action="append", default=[], metavar="NAME", help="an INT8 model's name")
    parser.add_argument("models", nargs="+", metavar="NAME=PATH")
    args = parser.parse_args()
    models = {name: Path(path) for name, _, path in (item.partition("=") for item in args.models)}
    batch = np.load(args.batch, allow_pickle=False)
    sizes = args.batch_size or [len(batch)]
    # Each size's runners are released before the next size's open, so no idle worker threads share the cores.
    print(json.dumps({str(size): time_in_this_process(models, batch[:size], args.threads, args.repeats, args.runtime,
                                                      tuple(args.int8)) for size in sizes}))


if __name__ == "__main__":
    main()
