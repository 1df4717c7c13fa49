"""Where Paddle Inference's time goes, FP32 against oneDNN INT8, op by op (issue 26).

    python benchmarks/trained_models.py --models rec --work /tmp/bench_work ...   # once: a store with one version
    python benchmarks/paddle_int8_profile.py --store /tmp/bench_work/rec_store --out benchmarks/results

From one quantgate version (export's FP32 program and quantize's PaddleSlim INT8 program), each program runs in
Paddle Inference exactly as the evaluate stage configures it (oneDNN; `enable_onednn_int8` for INT8), on the
version's test lines, with Paddle's own operator profiler (`Config.enable_profile`). Each form and batch size
runs in a child process (the profiler prints its table when the predictor is destroyed; the parent reads it),
once with 5 warm-up runs and once with 5 + `--runs`: the difference is the warm time per op.
Ops are grouped as INT8 kernels (convolutions/matmuls the passes quantized), conversions (quantize/dequantize),
and float compute; the counts come from the program the passes produced (the evaluate stage's `int8_ops`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from outputs import write_results  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)

EVENT = re.compile(r"^thread\d+::(\S+)\s+(\d+)\s+([\d.]+)\s")  # Paddle's "Event Summary" rows: op, calls, total ms
FRAMEWORK = ("Executor::Run", "RunPartialPreparedContext", "load_combine")
CONVERSIONS = ("quantize", "dequantize", "requantize")
WARMUP = 5  # runs whose profile is subtracted
INT8_KERNELS = ("fused_conv2d", "conv2d", "depthwise_conv2d", "fc", "fused_matmul", "matmul_v2", "matmul")


def child(form_dir: str, int8: bool, images_file: str, runs: int, threads: int) -> None:
    """Run one program `runs` times under Paddle's profiler; the table is printed when the predictor goes."""
    import paddle.inference as paddle_infer

    from quantgate.runtimes.forms import ModelForm
    from quantgate.runtimes.runtime_paddle import _config

    config = _config(ModelForm(Path(form_dir), int8, "", ""), threads)
    config.enable_profile()
    predictor = paddle_infer.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    images = np.load(images_file)
    handle.reshape(list(images.shape))
    handle.copy_from_cpu(images)
    for _ in range(runs):
        predictor.run()
    del predictor


def _profiled(form_dir: Path, int8: bool, images_file: Path, runs: int, threads: int) -> dict:
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(Path(form_dir).resolve()),
                           str(int(int8)), str(images_file.resolve()), str(runs), str(threads)],
                          capture_output=True, text=True, check=True, cwd=images_file.parent)  # its profile.log too
    total_ms = defaultdict(float)
    for line in (done.stdout + done.stderr).splitlines():
        found = EVENT.match(line.strip())
        if found and not found.group(1).startswith(FRAMEWORK):
            total_ms[found.group(1)] += float(found.group(3))
    if not total_ms:
        raise RuntimeError(f"Paddle's profiler printed no op table for {form_dir}:\n{done.stdout[-2000:]}")
    return total_ms


def profile(form_dir: Path, int8: bool, images: np.ndarray, runs: int, threads: int, scratch: Path) -> dict:
    """{op: ms per run} from Paddle's profiler for one program at one batch size, warm: the profile of
    WARMUP runs is subtracted from that of WARMUP + runs (the first runs create oneDNN's primitives)."""
    images_file = scratch / f"images_{len(images)}.npy"
    np.save(images_file, images)
    cold = _profiled(form_dir, int8, images_file, WARMUP, threads)
    warm = _profiled(form_dir, int8, images_file, WARMUP + runs, threads)
    per_op = {op: max(warm[op] - cold.get(op, 0.0), 0.0) / runs for op in warm}
    return dict(sorted(per_op.items(), key=lambda kv: -kv[1]))


def grouped(per_op: dict) -> dict:
    groups = defaultdict(float)
    for op, ms in per_op.items():
        kind = ("conversions" if op in CONVERSIONS else
                "convolutions/matmuls" if op in INT8_KERNELS else "float compute (the rest)")
        groups[kind] += ms
    return dict(groups)


def markdown(result: dict) -> str:
    lines = [f"# Paddle Inference, FP32 against oneDNN INT8, op by op: {result['command']}", "",
             f"{result['cpu']['model']} (flags: {', '.join(result['cpu']['flags'])}); {result['library']}; "
             f"{result['threads']} threads; {result['runs']} profiled runs per cell; model "
             f"{result['model']}/{result['version']}", "",
             "| batch | form | profiled ms per run | convolutions/matmuls | conversions | float compute "
             "| top ops (ms) |",
             "|---:|---|---:|---:|---:|---:|---|"]
    for row in result["rows"]:
        total, groups = sum(row["per_op_ms"].values()), row["groups_ms"]
        top = ", ".join(f"{op} {ms:.2f}" for op, ms in list(row["per_op_ms"].items())[:5])
        cells = [f"{groups.get(kind, 0):.2f} ({100 * groups.get(kind, 0) / total:.0f} %)"
                 for kind in ("convolutions/matmuls", "conversions", "float compute (the rest)")]
        lines.append(f"| {row['batch']} | {row['form']} | {total:.2f} | {' | '.join(cells)} | {top} |")
    ops = result["int8_program"]
    lines += ["", f"The INT8 program after oneDNN's passes: {ops['int8']} of {ops['total_conv_matmul']} "
              f"convolutions/matmuls in INT8; conversions {ops['conversions']}; ops computing in float "
              f"{ops['float_compute']}.", "",
              f"The FP32 program after its passes: {result['fp32_program']}."]
    return "\n".join(lines) + "\n"


def program_ops(form_dir: Path) -> dict:
    """Op types of the FP32 program as Paddle Inference's passes leave it."""
    from collections import Counter

    from quantgate.runtimes.forms import ModelForm
    from quantgate.runtimes.runtime_paddle import optimized_program

    program = optimized_program(ModelForm(form_dir, False, "", ""))
    counts = Counter(op.type for op in program.blocks[0].ops if op.type not in ("feed", "fetch"))
    return dict(counts.most_common())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2] == "1", argv[3], int(argv[4]), int(argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with one version (three runtimes)")
    parser.add_argument("--out", type=Path, default=None, help="folder for paddle_int8_profile.json and .md")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--runs", type=int, default=50, help="profiled runs per form and batch size")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.runs < 10:  # the warm-up profile comes from another process: its cold costs differ a little
        parser.error(f"--runs {args.runs} is too few: give at least 10 (the warm-up subtraction needs the warm runs "
                     "to dominate)")
    import tempfile

    from trained_models import stored_run

    from quantgate.runtimes.cpu import cpu_record
    from quantgate.runtimes.forms import ModelForm
    from quantgate.runtimes.runtime_paddle import int8_ops, library
    from quantgate.samples.reading import open_data

    run = stored_run(args.store)
    folders = run["folders"]
    images, _ = open_data(folders["data"]).array("test", limit=max(args.batches))
    forms = {"paddle_fp32_onednn": (folders["export"], False), "quantgate_int8_paddle": (folders["quantize"], True)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="quantgate-profile-") as scratch:
        for batch in args.batches:
            batch_images = np.ascontiguousarray(images[np.arange(batch) % len(images)])
            for form, (form_dir, int8) in forms.items():
                per_op = profile(form_dir, int8, batch_images, args.runs, args.threads, Path(scratch))
                rows.append({"batch": batch, "form": form, "per_op_ms": per_op, "groups_ms": grouped(per_op)})
                print(f"batch {batch} {form}: {sum(per_op.values()):.2f} ms per profiled run", flush=True)
    result = {"command": "python benchmarks/paddle_int8_profile.py " + " ".join(argv), "cpu": cpu_record(),
              "library": library(), "threads": args.threads, "runs": args.runs, "model": run["model"],
              "version": run["version"], "rows": rows,
              "int8_program": int8_ops(ModelForm(folders["quantize"], True, "", "")),
              "fp32_program": program_ops(folders["export"])}
    write_results(args.out, "paddle_int8_profile", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
