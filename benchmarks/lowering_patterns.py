"""What each rewrite of the INT8 lowering gains in onnxruntime on a real backbone, pattern by pattern.

    python benchmarks/trained_models.py --models rec --work /tmp/bench_work ...   # once: a store with one version
    python benchmarks/lowering_patterns.py --store /tmp/bench_work/rec_store --out benchmarks/results

From one quantgate version of PP-OCRv4's recognizer (its PaddleSlim program and paddle2onnx model), the
convert stage's lowering is run again with its backbone rewrites switched on one at a time:

  paddle2onnx_int8     paddle2onnx's QDQ model of the PaddleSlim program, as onnxruntime gets it
  lowered_plain        the lowering without the backbone rewrites (the lowering before issue 26)
  + affines            scalar affines (PP-LCNetV3's learnable affine blocks) folded into the grids beside them
  + integer_hardswish  HardSwish as QLinearAdd + QLinearMul
  + 7-bit weights      conv/matmul weights in [-64, 63] (the convert stage's choice on x86 CPUs without
                       VNNI/AMX, whose u8 x s8 kernels saturate with 8-bit weights: quantgate/int8/weight_range.py)
  + hardswish grids    8-bit weights; an affine after HardSwish that no other absorption takes gets a grid of
                       its own with an exact zero point (quantgate/int8/affine_absorption.py), timed against
                       + integer_hardswish: the convert stage's default on VNNI/AMX CPUs
  ort_quantize_static  peer: onnxruntime's own quantize_static (QDQ, per channel, u8/s8, MinMax), same lines

Each runs in onnxruntime (2 threads) at batch 1 and 16, timed round by round against the step before it
(`gain_paired`: the previous step's time over this one's, bootstrap 95% CI), and is scored on the version's
test lines (line accuracy, agreement with FP32), and line by line against the step before it (the lines only one
of the two reads right, and McNemar's exact p: whether the accuracy difference is more than chance). The ops
onnxruntime runs after its own optimizer are counted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from int8_onnx import paired_ratio, time_variants  # noqa: E402
from outputs import write_results  # noqa: E402
from trained_models import build_peers, cpuinfo_int8_flags, stored_run  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.int8.lower_int8 import lower_int8  # noqa: E402
from quantgate.int8.onnx_ops import runtime_op_counts  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.runtimes.forms import ModelForm, open_runner  # noqa: E402
from quantgate.samples.reading import open_data  # noqa: E402
from quantgate.stages.convert.outputs import FP32_FILE, PADDLE2ONNX_INT8_FILE  # noqa: E402

STEPS = (("lowered_plain", {"absorb_affines": False, "hardswish_in_integers": False}),
         ("+ affines", {"absorb_affines": True, "hardswish_in_integers": False, "hardswish_grids": False}),
         ("+ integer_hardswish", {"absorb_affines": True, "hardswish_in_integers": True, "hardswish_grids": False}),
         ("+ 7-bit weights", {"absorb_affines": True, "hardswish_in_integers": True, "hardswish_grids": False,
                              "weight_bits": 7}),
         ("+ hardswish grids", {"absorb_affines": True, "hardswish_in_integers": True, "hardswish_grids": True}))
# Each step's gain is over the step before it, but the last (8-bit weights, like + integer_hardswish) is over that one.
GAIN_OVER = {"+ hardswish grids": "+ integer_hardswish"}
SHOWN_OPS = ("QLinearConv", "QLinearAdd", "QLinearMul", "QuantizeLinear", "DequantizeLinear", "Mul", "Add",
             "HardSigmoid")


def variants(folders: dict, work: Path, data) -> tuple[dict[str, Path], dict]:
    convert, paddle_prefix = folders["convert"], folders["quantize"] / "model"
    files = {"ort_fp32": convert / FP32_FILE, "paddle2onnx_int8": convert / PADDLE2ONNX_INT8_FILE}
    lowering = {}
    for name, switches in STEPS:
        files[name] = work / f"{name.strip('+ ').replace(' ', '_')}.onnx"
        metrics = lower_int8(convert / PADDLE2ONNX_INT8_FILE, files[name], paddle_model_prefix=paddle_prefix,
                             **switches).metrics
        lowering[name] = {"absorbed_affines": metrics["absorbed_affines"],
                          "integer_hardswish": metrics["integer_hardswish"]}
    peers, _, _ = build_peers(convert / FP32_FILE, data, work)
    files["ort_quantize_static"] = peers["ort_quantize_static"][1].path
    return files, lowering


def scores(files: dict[str, Path], data, threads: int) -> dict[str, dict]:
    images, _ = data.array("test")
    references, task = data.references("test"), data.task
    predicted = {}
    for name, path in files.items():
        run = open_runner("onnxruntime", ModelForm(path, True, "", ""), threads, (16, *images.shape[1:]))
        predicted[name] = task.predict(np.concatenate([run(images[i:i + 16]) for i in range(0, len(images), 16)]))
        del run
    result = {name: {**task.scores(references, lines), "agreement": float(np.mean(lines == predicted["ort_fp32"]))}
              for name, lines in predicted.items()}
    order = list(files)
    for index, name in enumerate(order):
        if name in dict(STEPS):
            result[name]["paired"] = paired_lines(predicted[name], predicted[GAIN_OVER.get(name, order[index - 1])],
                                                  references)
    return result


def paired_lines(these: np.ndarray, those: np.ndarray, references: np.ndarray) -> dict:
    """Lines read right by one variant and not the other, and McNemar's exact p: is the difference chance?"""
    only_these = int(np.sum((these == references) & (those != references)))
    only_those = int(np.sum((these != references) & (those == references)))
    p = binomtest(only_these, only_these + only_those).pvalue if only_these + only_those else 1.0
    return {"only_this_step": only_these, "only_the_step_before": only_those, "mcnemar_p": float(p)}


def latencies(files: dict[str, Path], data, batches: list[int], repeats: int, rounds: int, threads: int) -> list[dict]:
    images, _ = data.array("test", limit=max(batches))
    order = list(files)
    rows = []
    for batch_size in batches:
        runners = {name: open_runner("onnxruntime", ModelForm(path, True, "", ""), threads,
                                     (batch_size, *images.shape[1:])) for name, path in files.items()}
        batch = np.ascontiguousarray(images[np.arange(batch_size) % len(images)])
        by_round = time_variants(runners, batch, repeats, rounds)
        del runners
        median = {name: float(np.median(np.concatenate(blocks))) for name, blocks in by_round.items()}
        for index, name in enumerate(order):
            previous = GAIN_OVER.get(name, order[index - 1]) if name in dict(STEPS) else None
            rows.append({"batch": batch_size, "variant": name, "latency_ms_p50": median[name],
                         "speedup_vs_ort_fp32": median["ort_fp32"] / median[name],
                         "gain_over": previous,
                         "gain_paired": paired_ratio(by_round[previous], by_round[name]) if previous else None})
    return rows


def _paired(paired: dict | None) -> str:
    if not paired:
        return ""
    return f"{paired['only_this_step']} / {paired['only_the_step_before']} ({paired['mcnemar_p']:.2f})"


def markdown(result: dict) -> str:
    lines = [f"# INT8 lowering, pattern by pattern: {result['command']}", "",
             f"{result['cpu']['model']} (flags: {', '.join(result['cpu']['flags'])}; /proc/cpuinfo INT8 flags: "
             f"{', '.join(result['cpuinfo_int8_flags']) or 'none'}); onnxruntime {result['onnxruntime']}; "
             f"{result['threads']} threads; {result['repeats']} timed runs per cell in {result['rounds']} rounds; "
             f"model {result['model']}/{result['version']}", "",
             "| batch | variant | median ms | vs ort_fp32 | gain of this step (paired, 95% CI) | line accuracy % | "
             "CER % | agreement | lines right only here / only before (McNemar p) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["latency"]:
        score, gain = result["scores"][row["variant"]], row["gain_paired"]
        gain_text = f"{gain['median']:.2f}x ({gain['ci95'][0]:.2f}-{gain['ci95'][1]:.2f})" if gain else ""
        lines.append(f"| {row['batch']} | {row['variant']} | {row['latency_ms_p50']:.2f} | "
                     f"{row['speedup_vs_ort_fp32']:.2f}x | {gain_text} | {score['top1_pct']:.2f} | "
                     f"{score['cer_pct']:.2f} | {score['agreement']:.4f} | {_paired(score.get('paired'))} |")
    lines += ["", "Ops onnxruntime runs (after its optimizer):", "",
              "| variant | " + " | ".join(SHOWN_OPS) + " |", "|---|" + "---:|" * len(SHOWN_OPS)]
    for name, ops in result["runtime_ops"].items():
        lines.append(f"| {name} | " + " | ".join(str(ops.get(op, 0)) for op in SHOWN_OPS) + " |")
    lines += ["", "Rewrites applied: " + "; ".join(
        f"{name}: affines {info['absorbed_affines']}, integer HardSwish {info['integer_hardswish']}"
        for name, info in result["lowering"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store with one version of the recognizer")
    parser.add_argument("--out", type=Path, default=None, help="folder for lowering_patterns.json and .md")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    import onnxruntime

    run = stored_run(args.store)
    data = open_data(run["folders"]["data"])
    with tempfile.TemporaryDirectory(prefix="quantgate-lowering-") as scratch:
        files, lowering = variants(run["folders"], Path(scratch), data)
        result = {
            "command": "python benchmarks/lowering_patterns.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(), "onnxruntime": onnxruntime.__version__,
            "threads": args.threads, "repeats": args.repeats, "rounds": args.rounds,
            "model": run["model"], "version": run["version"], "lowering": lowering,
            "runtime_ops": {name: runtime_op_counts(path)["ops"] for name, path in files.items()},
            "scores": scores(files, data, args.threads),
            "latency": latencies(files, data, args.batches, args.repeats, args.rounds, args.threads),
        }
    write_results(args.out, "lowering_patterns", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
