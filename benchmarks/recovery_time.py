"""Issue 45, where recovery's time goes: AdaRound (`quantize.rounding: adaptive`) on one stored version's export,
timed part by part.

    python benchmarks/recovery_time.py --version STORE/MODEL/versions/vN --work /tmp/rt [--samples 64]
        [--iterations 500] [--algo mse] [--hardswish-grids] [--fit-on-program]

Runs the quantize stage's own `quantize_with_data` (strategy single) on the version's export and calibration split,
with AdaRound's parts wrapped in timers: lowering the INT8 program once and computing each layer's input in that
lowered model (as the flow fits; `--fit-on-program`: each layer's input from PaddleSlim's program, a pruned run
carried on from the previous layer's), the FP32 inputs, and the fitting of each layer. Prints one line per
layer (op, weight shape, input shape, seconds in each part) and the totals, with the CPU's flags; writes the same as
JSON to WORK/recovery_time.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks")]

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.config import QuantizeConfig  # noqa: E402
from quantgate.int8.lower_int8 import Lowering  # noqa: E402
from quantgate.stages.data import open_data  # noqa: E402
from quantgate.stages.quantize import adaround  # noqa: E402
from quantgate.stages.quantize.ptq import quantize_with_data  # noqa: E402


def cpu_flags() -> str:
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16")
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return f"{model}: {' '.join(flag for flag in wanted if flag in flags)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", type=Path, required=True, help="a version folder with export/ and data/")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--algo", default="mse")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--hardswish-grids", action="store_true", help="the lowering fitted through: convert.hardswish_grids")
    parser.add_argument("--fit-on-program", action="store_true", help="each layer's input from PaddleSlim's program")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    spent: dict[str, float] = defaultdict(float)
    layers: list[dict] = []
    original_fetch, original_refit = adaround._fetch, adaround.refit_layer

    def fetch(program, images, names, carried=None):
        started = time.perf_counter()
        found = original_fetch(program, images, names, carried)
        spent["fetch_int8" if "fetch_fp32" in spent else "fetch_fp32"] += time.perf_counter() - started  # FP32 first
        return found

    def refit_layer(layer, weight, step, inputs, fp32_inputs, gain, iterations, batch, rng, factor=1):
        started = time.perf_counter()
        refit = original_refit(layer, weight, step, inputs, fp32_inputs, gain, iterations, batch, rng, factor)
        seconds = time.perf_counter() - started
        spent["refit"] += seconds
        layers.append({"op": layer.op_type, "weight": list(weight.shape), "input": list(inputs.shape[1:]),
                       "refit_s": round(seconds, 2), "kept": refit.error_adaptive < refit.error_nearest})
        print(f"{len(layers):3d} {layer.op_type:17s} w{list(weight.shape)!s:22s} x{list(inputs.shape[1:])!s:20s} "
              f"{seconds:6.2f} s", flush=True)
        return refit

    def timed(part, method):
        def run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - started
        return run

    adaround._fetch, adaround.refit_layer = fetch, refit_layer
    Deployed = adaround.DeployedInputs
    Deployed.lowered = classmethod(timed("lowering", Deployed.lowered.__func__))
    Deployed.inputs = timed("inputs_lowered_model", Deployed.inputs)
    config = QuantizeConfig(strategy="single", algo=args.algo, rounding="adaptive", batch_size=args.batch_size,
                            adaround_samples=args.samples, adaround_iterations=args.iterations)
    out = args.work / "quantize"
    out.mkdir(exist_ok=True)
    started = time.perf_counter()
    result = quantize_with_data(config, args.version / "export", "model.pdmodel", "model.pdiparams",
                                open_data(args.version / "data"), out,
                                adaround_lowering=None if args.fit_on_program else Lowering(8, args.hardswish_grids))
    total = time.perf_counter() - started
    record = result.metrics["adaround"]
    summary = {"cpu": cpu_flags(), "samples": args.samples, "iterations": args.iterations,
               "inputs_from": "program" if args.fit_on_program else "lowered model",
               "hardswish_grids": args.hardswish_grids,
               "stage_s": round(total, 1), "adaround_s": record["seconds"],
               **{f"{part}_s": round(seconds, 1) for part, seconds in spent.items()},
               "layers": len(layers), "kept": sum(layer["kept"] for layer in layers), "per_layer": layers}
    (args.work / "recovery_time.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({key: value for key, value in summary.items() if key != "per_layer"}, indent=2))


if __name__ == "__main__":
    main()
