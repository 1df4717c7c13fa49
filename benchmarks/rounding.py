"""The INT8 weights of a real model: nearest or adaptive rounding (AdaRound), 8 or 7 bits, paired on the same lines.

    python benchmarks/trained_models.py --models rec --work /tmp/bench_work ...   # once: a store with one version
    python benchmarks/rounding.py --store /tmp/bench_work/rec_store --work /tmp/rounding --out benchmarks/results \\
        --variants mse:nearest:8:8,mse:nearest:8:7,mse:nearest:7:7,mse:adaptive:8:8

A variant is `algo:rounding:quantize_bits:lowered_bits`. From the version's export and data, each runs the
quantize stage's own code (`quantize_with_data`, strategy single, on the version's calibration split, weights
rounded to `quantize_bits`: 7 is what the flow does on a CPU without VNNI/AMX) and the convert stage's
(`convert`, weights lowered to `lowered_bits`). `8:7` is how 7-bit weights were made before: PaddleSlim's 8-bit
codes halved by the lowering. Rounding `adaptive` fits each layer on what the lowered model feeds it (the flow's
AdaRound, with --hardswish-grids as given), `adaptive-program` on what PaddleSlim's program feeds it (before).
The first calibration's statistics serve every later variant of the same algo.
Each variant is scored against FP32 on the validation and test lines together:

  lowered      int8.onnx in onnxruntime, graph optimizations on (what the evaluate stage runs); 8-bit weights on a
               CPU without an INT8 dot product run with session.x64quantprecision=1 (MLAS's u8 x u8 kernels,
               exact, what a VNNI/AMX CPU computes; its u8 x s8 ones saturate)
  openvino     int8.onnx in OpenVINO, as the evaluate stage compiles it (f32 inference precision, static batch)
  qdq          paddle2onnx's int8_paddle2onnx.onnx in onnxruntime with optimizations off: each Q/DQ pair exactly
               its rounding, i.e. PaddleSlim's program as it is

With `--fresh-lines N` the lines scored are N new ones instead (rendered like the version's, `--fresh-seed`, prepared
by the data stage with the version's data settings): more lines tell smaller differences from chance, and none of
them was seen by any choice made on the version's validation lines.

Scored by line accuracy, agreement with FP32 and the mean per-frame KL divergence from FP32's distribution
over characters; each variant's lines are compared with the first variant's by McNemar's exact test, and
latency of `lowered` at batch 1 and 16 (median of --repeats, this machine, --threads).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from int8_error_sources import Scorer  # noqa: E402
from outputs import write_results  # noqa: E402
from scipy.stats import binomtest  # noqa: E402
from support.ocr_samples import render_financial_lines, write_label_file  # noqa: E402
from trained_models import stored_run  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.config import QuantizeConfig  # noqa: E402
from quantgate.data_config import DataConfig  # noqa: E402
from quantgate.int8.lower_int8 import Lowering  # noqa: E402
from quantgate.int8.weight_range import WeightBits, onnxruntime_weight_bits  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.runtimes.forms import ModelForm  # noqa: E402
from quantgate.runtimes.runtime_openvino import Runner as OpenVinoRunner  # noqa: E402
from quantgate.samples.reading import open_data  # noqa: E402
from quantgate.stages.convert.onnx_export import convert  # noqa: E402
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, PADDLE2ONNX_INT8_FILE  # noqa: E402
from quantgate.stages.data import prepare_data  # noqa: E402
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE  # noqa: E402
from quantgate.stages.quantize.ptq import quantize_with_data  # noqa: E402

METRICS = "quantize_metrics.json"  # a variant's quantize metrics, beside its INT8 program


def variant_folder(work: Path, variant: str) -> Path:
    return work / variant.replace(":", "-")


def fresh_data(run: dict, count: int, seed: int, work: Path):
    """`count` new lines (rendered with `seed`) as the test split of a data stage run with the version's settings
    (its calibration and validation splits: 32 other new lines, unused)."""
    root = work / f"fresh-{seed}-{count}"
    write_label_file(root / "fresh.txt", render_financial_lines(root, count, seed=seed))
    write_label_file(root / "unused.txt", render_financial_lines(root, 32, seed=seed + 1000))
    settings = dict(run["record"]["config"]["data"], path=str(root), label_file=str(root / "unused.txt"),
                    test_label_file=str(root / "fresh.txt"), validation_fraction=0.005)
    (root / "data").mkdir()
    prepare_data(DataConfig(**settings), root / "data", training=False)
    return open_data(root / "data")


def exact_session(onnx_file: Path, threads: int, exact: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads, options.log_severity_level = threads, 1, 3
    if exact:  # u8 x u8 kernels: no 16-bit pair sums to saturate (onnxruntime's kOrtSessionOptionsAvx2PrecisionMode)
        options.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])


def session_outputs(session: ort.InferenceSession, images: np.ndarray) -> np.ndarray:
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: images[i:i + 32]})[0] for i in range(0, len(images), 32)])


def median_ms(session: ort.InferenceSession, batch: np.ndarray, repeats: int) -> float:
    name = session.get_inputs()[0].name
    for _ in range(3):
        session.run(None, {name: batch})
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        session.run(None, {name: batch})
        times.append(time.perf_counter() - started)
    return round(1000 * float(np.median(times)), 2)


def openvino_outputs(scorer: Scorer, onnx_file: Path, threads: int) -> np.ndarray:
    form = ModelForm(onnx_file, True, onnx_file.name, "convert")
    return OpenVinoRunner(form, threads, (32, *scorer.images.shape[1:]))(scorer.images)


def scored(scorer: Scorer, probs: np.ndarray) -> tuple[dict, np.ndarray]:
    lines = scorer.task.predict(probs)
    kl = np.sum(scorer.fp32_probs * (np.log(scorer.fp32_probs + 1e-12) - np.log(probs + 1e-12)), axis=-1)
    right = np.asarray(lines == scorer.references)
    return {"line_accuracy_pct": scorer.task.scores(scorer.references, lines)["top1_pct"], "agreement": float(np.mean(lines == scorer.fp32_lines)),
            "kl_per_frame": float(np.mean(kl))}, right


def mcnemar(first: np.ndarray, other: np.ndarray) -> dict:
    gained, lost = int(np.sum(~first & other)), int(np.sum(first & ~other))
    p = binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
    return {"lines_gained": gained, "lines_lost": lost, "p": float(p)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with one version of the model")
    parser.add_argument("--work", type=Path, required=True, help="an empty folder for each variant's models")
    parser.add_argument("--out", type=Path, default=None, help="folder for rounding.json and rounding.md")
    parser.add_argument("--variants", default="mse:nearest:8:8,mse:nearest:8:7,mse:nearest:7:7",
                        help="algo:rounding:quantize_bits:lowered_bits, comma-separated")
    parser.add_argument("--samples", type=int, default=64, help="quantize.adaround_samples")
    parser.add_argument("--iterations", type=int, default=500, help="quantize.adaround_iterations")
    parser.add_argument("--calibration", type=int, default=256, help="quantize.max_calibration_samples")
    parser.add_argument("--hardswish-grids", action="store_true", help="convert.hardswish_grids: true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20, help="timed runs of `lowered` per batch size")
    parser.add_argument("--quantized-from", type=Path, default=None,
                        help="an earlier run's --work: each variant's quantize folder is taken from there, not made")
    parser.add_argument("--fresh-lines", type=int, default=0, help="score on this many new lines, not the version's")
    parser.add_argument("--fresh-seed", type=int, default=7, help="the new lines' rendering seed")
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    if args.quantized_from is not None:  # before any variant runs, not after the first hour
        missing = [name for name in names if not (variant_folder(args.quantized_from, name) / "quantize").is_dir()]
        if missing:
            parser.error(f"--quantized-from {args.quantized_from} has no quantize folder for {', '.join(missing)}: "
                         "run those variants without --quantized-from first")

    run = stored_run(args.store)
    data = open_data(run["folders"]["data"])
    export = run["folders"]["export"]
    scorer = (Scorer(fresh_data(run, args.fresh_lines, args.fresh_seed, args.work), args.threads, ("test",))
              if args.fresh_lines else Scorer(data, args.threads))
    saturates = onnxruntime_weight_bits(cpu_record()["flags"]).bits == 7  # this CPU's u8 x s8 kernels
    variants, first_right, statistics = {}, {}, {}
    for variant in names:
        algo, rounding, quantize_bits, lowered_bits = variant.split(":")
        folder = variant_folder(args.work, variant)
        (folder / "convert").mkdir(parents=True)
        # 'adaptive' fits each layer through the lowered model, as the flow does; 'adaptive-program' on the inputs
        # PaddleSlim's program feeds it (before issue 45's second session)
        through = None if rounding == "adaptive-program" else Lowering(int(lowered_bits), args.hardswish_grids)
        rounding = rounding.removesuffix("-program")
        config = QuantizeConfig(strategy="single", algo=algo, rounding=rounding, adaround_samples=args.samples,
                                adaround_iterations=args.iterations, max_calibration_samples=args.calibration)
        started = time.perf_counter()
        if args.quantized_from is not None:  # the same variant's INT8 program, made by an earlier run
            shutil.copytree(variant_folder(args.quantized_from, variant) / "quantize", folder / "quantize")
            kept = folder / "quantize" / METRICS
            metrics = json.loads(kept.read_text()) if kept.exists() else {"adaround": None}
        else:
            quantized = quantize_with_data(config, export, MODEL_FILE, PARAMS_FILE, data, folder / "quantize",
                                           statistics=statistics.get(algo), weight_bits=int(quantize_bits),
                                           adaround_lowering=through)
            statistics.setdefault(algo, quantized.statistics)
            metrics = quantized.metrics
            (folder / "quantize" / METRICS).write_text(json.dumps(metrics, indent=2, default=str) + "\n")
        quantize_s = time.perf_counter() - started
        convert(export, folder / "quantize", MODEL_FILE, PARAMS_FILE, folder / "convert",
                WeightBits(int(lowered_bits), "the variant's"), hardswish_grids=args.hardswish_grids)
        if scorer.fp32_probs is None:
            scorer.score(folder / "convert" / FP32_FILE, optimized=True)  # the reference every variant is scored on
        exact = saturates and lowered_bits == "8"
        lowered = exact_session(folder / "convert" / INT8_FILE, args.threads, exact)
        outputs = {"lowered": session_outputs(lowered, scorer.images),
                   "openvino": openvino_outputs(scorer, folder / "convert" / INT8_FILE, args.threads),
                   "qdq": scorer.outputs(folder / "convert" / PADDLE2ONNX_INT8_FILE, optimized=False)}
        record = {"quantize_s": round(quantize_s, 1), "adaround": metrics["adaround"],
                  "quantized_from": str(args.quantized_from) if args.quantized_from else None,
                  "lowered_exact_u8u8": exact,
                  "lowered_ms": {batch: median_ms(lowered, scorer.images[:batch], args.repeats) for batch in (1, 16)}}
        for name, probs in outputs.items():
            record[name], right = scored(scorer, probs)
            first_right.setdefault(name, right)
            record[name]["vs_first_variant"] = mcnemar(first_right[name], right)
        variants[variant] = record
        print(variant, {name: record[name] for name in outputs}, f"quantize {quantize_s:.0f} s", flush=True)
    fp32, _ = scored(scorer, scorer.fp32_probs)
    fp32_session = exact_session(variant_folder(args.work, names[0]) / "convert" / FP32_FILE, args.threads, False)
    fp32["lowered_ms"] = {batch: median_ms(fp32_session, scorer.images[:batch], args.repeats) for batch in (1, 16)}
    command = "python benchmarks/rounding.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": command, "cpu": cpu_record(), "onnxruntime": ort.__version__, "model": run["model"],
              "version": run["version"], "splits": scorer.splits, "lines": len(scorer.images),
              "fresh_lines": {"count": args.fresh_lines, "seed": args.fresh_seed} if args.fresh_lines else None,
              "hardswish_grids": args.hardswish_grids, "threads": args.threads, "fp32": fp32, "variants": variants}
    write_results(args.out, "rounding", result, markdown(result))
    return 0


def markdown(result: dict) -> str:
    cpu, fp32, fresh = result["cpu"], result["fp32"], result.get("fresh_lines")
    scored_on = f"new lines, seed {fresh['seed']}" if fresh else " + ".join(result["splits"])
    lines = [f"# INT8 weights, rounding and bits: {result['command']}", "",
             f"{cpu['model']} (flags: {', '.join(cpu['flags'])}); onnxruntime {result['onnxruntime']}, "
             f"{result['threads']} threads; model {result['model']}/{result['version']}; {result['lines']} lines "
             f"({scored_on}); FP32 (onnxruntime) {fp32['line_accuracy_pct']:.2f} %, "
             f"{fp32['lowered_ms'][1]:.2f} / {fp32['lowered_ms'][16]:.2f} ms at batch 1 / 16; "
             f"convert.hardswish_grids {result['hardswish_grids']}", "",
             "| variant | quantize s | model | line accuracy % | agreement | KL per frame | lines +/- vs first (p) "
             "| ms b1 / b16 |", "|---|---:|---|---:|---:|---:|---|---:|"]
    for variant, record in result["variants"].items():
        for name in ("lowered", "openvino", "qdq"):
            r, m = record[name], record[name]["vs_first_variant"]
            label = name + (" (u8u8 exact)" if name == "lowered" and record["lowered_exact_u8u8"] else "")
            speed = f"{record['lowered_ms'][1]:.2f} / {record['lowered_ms'][16]:.2f}" if name == "lowered" else ""
            made = "reused" if record["quantized_from"] else f"{record['quantize_s']:.0f}"
            lines.append(f"| {variant} | {made} | {label} | {r['line_accuracy_pct']:.2f} | "
                         f"{r['agreement']:.4f} | {r['kl_per_frame']:.4f} | +{m['lines_gained']} / -{m['lines_lost']} "
                         f"({m['p']:.2f}) | {speed} |")
        if record["adaround"]:
            layers = record["adaround"]["layers"]
            kept = [layer for layer in layers.values() if layer["kept"]]
            lines.append(f"| {variant} | | AdaRound | {len(kept)} of {len(layers)} layers refitted, "
                         f"{sum(layer['codes_changed'] for layer in kept)} codes moved, "
                         f"{record['adaround']['seconds']:.0f} s | | | | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
