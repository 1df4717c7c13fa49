"""INT8 on CPU, side by side: is quantgate's INT8 ONNX actually faster, smaller and as accurate?

    python benchmarks/int8_onnx.py --out benchmarks/results        # ~5-10 min on 2 cores

For ResNet18 and MobileNetV2 (paddle.vision, random init, 224x224) and the pipeline's own digits
CNN (trained here with the default config), at batch 1 and 16 with a fixed thread count, it times:

  ort_fp32            paddle2onnx FP32 model in onnxruntime
  paddle2onnx_int8    paddle2onnx's INT8 model of the PaddleSlim-quantized network
  quantgate_int8      that model lowered by quantgate (stages/lower_int8.py), the released artifact
  ort_quantize_static onnxruntime's own quantize_static on the FP32 ONNX (QDQ, uint8 activations,
                      int8 per-channel weights, MinMax) on the same calibration inputs
  paddle_fp32_onednn  Paddle Inference, oneDNN, FP32 model
  paddle_int8_onednn  Paddle Inference, oneDNN INT8 (enable_onednn_int8) on the PaddleSlim model

and writes int8_onnx.json and int8_onnx.md: median and p10-p90 latency, file size, speedup vs
ort_fp32, top-1 agreement with ort_fp32 (and accuracy on digits), and which targets were met. Each
variant is compared with quantgate_int8 round by round as well (`their_over_quantgate_time_paired`):
both were timed in the same round, so drift of the shared machine cancels out of the ratio.
Every model is built by the project's own stage functions (export via paddle.jit.save for the
vision models, quantize_with_images, to_onnx, lower_int8); nothing is read from earlier runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import paddle
import paddle.inference as paddle_infer
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

import quantgate  # noqa: F401  (legacy program format for PaddleSlim, before paddle is imported)
from quantgate.config import PipelineConfig, QuantizeConfig
from quantgate.stages.convert.lower_int8 import lower_int8
from quantgate.stages.convert.onnx_export import to_onnx
from quantgate.stages.convert.onnx_ops import runtime_op_counts
from quantgate.stages.data.splits import load_splits, prepare_data
from quantgate.stages.evaluate.accuracy import session
from quantgate.stages.export.inference_model import export
from quantgate.stages.quantize.ptq import quantize_with_images
from quantgate.stages.train.loop import train

VARIANTS = ("ort_fp32", "paddle2onnx_int8", "quantgate_int8", "ort_quantize_static",
            "paddle_fp32_onednn", "paddle_int8_onednn")
VISION_MODELS = ("resnet18", "mobilenet_v2")
WARMUP = 3
SETTLE_S = 0.5


@dataclass
class Workload:
    """One network: its models on disk, calibration inputs and held-out evaluation inputs."""

    name: str
    folder: Path
    calibration: np.ndarray
    evaluation: np.ndarray
    labels: np.ndarray | None  # digits only
    data_note: str


def vision_workload(name: str, folder: Path, calibration_images: int, evaluation_images: int) -> Workload:
    paddle.seed(0)
    model = getattr(paddle.vision.models, name)(num_classes=1000)
    model.eval()
    (folder / "fp32").mkdir(parents=True)
    spec = paddle.static.InputSpec([None, 3, 224, 224], "float32", "x")
    paddle.jit.save(model, str(folder / "fp32" / "model"), input_spec=[spec])
    calibration = np.random.default_rng(0).standard_normal((calibration_images, 3, 224, 224)).astype(np.float32)
    evaluation = np.random.default_rng(1).standard_normal((evaluation_images, 3, 224, 224)).astype(np.float32)
    note = (f"random-init weights; calibrated on {calibration_images} synthetic N(0,1) images (seed 0), "
            f"agreement on {evaluation_images} other synthetic images (seed 1)")
    return Workload(name, folder, calibration, evaluation, None, note)


def digits_workload(folder: Path) -> Workload:
    """The pipeline's default model, trained with the default config by the pipeline's stages."""
    config = PipelineConfig()
    for stage in ("data", "train", "fp32"):
        (folder / stage).mkdir(parents=True)
    prepare_data(config.data, folder / "data")
    splits_path = folder / "data" / "splits.npz"
    train(config.train, splits_path, folder / "train")
    export(folder / "train" / "weights.npz", folder / "train" / "reference_logits.npy", splits_path, "digits_cnn",
           folder / "fp32")
    splits = load_splits(splits_path)
    note = (f"sklearn digits, trained {config.train.epochs} epochs; calibrated on the {len(splits.x_calibration)}-image "
            f"calibration split, accuracy and agreement on the {len(splits.x_test)}-image test split")
    return Workload("digits_cnn", folder, splits.x_calibration, splits.x_test, splits.y_test, note)


class Reader(CalibrationDataReader):
    def __init__(self, images: np.ndarray, batch: int):
        self.batches = iter([{"x": images[i : i + batch]} for i in range(0, len(images), batch)])

    def get_next(self):
        return next(self.batches, None)


def build_models(work: Workload, quantize_config: QuantizeConfig) -> dict[str, dict]:
    """Every variant's files, built with the project's stage functions (plus onnxruntime's quantizer)."""
    folder = work.folder
    quantized = quantize_with_images(quantize_config, folder / "fp32", "model.pdmodel", "model.pdiparams",
                                     work.calibration, folder / "int8")
    to_onnx(folder / "fp32" / "model.pdmodel", folder / "fp32" / "model.pdiparams", folder / "fp32.onnx")
    to_onnx(folder / "int8" / "model.pdmodel", folder / "int8" / "model.pdiparams", folder / "paddle2onnx_int8.onnx")
    lowering = lower_int8(folder / "paddle2onnx_int8.onnx", folder / "quantgate_int8.onnx",
                          paddle_model_prefix=folder / "int8" / "model").metrics
    quant_pre_process(str(folder / "fp32.onnx"), str(folder / "fp32_pre.onnx"), skip_symbolic_shape=True)
    quantize_static(str(folder / "fp32_pre.onnx"), str(folder / "ort_quantize_static.onnx"),
                    Reader(work.calibration, quantize_config.batch_size), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    paddle_bytes = lambda sub: sum((folder / sub / f).stat().st_size for f in ("model.pdmodel", "model.pdiparams"))  # noqa: E731
    return {
        "ort_fp32": {"onnx": folder / "fp32.onnx"},
        "paddle2onnx_int8": {"onnx": folder / "paddle2onnx_int8.onnx"},
        "quantgate_int8": {"onnx": folder / "quantgate_int8.onnx", "lowering": lowering},
        "ort_quantize_static": {"onnx": folder / "ort_quantize_static.onnx"},
        "paddle_fp32_onednn": {"paddle": folder / "fp32", "int8": False, "bytes": paddle_bytes("fp32")},
        "paddle_int8_onednn": {"paddle": folder / "int8", "int8": True, "bytes": paddle_bytes("int8"),
                               "paddleslim": quantized.metrics["algo"]},
    }


class PaddleRunner:
    """Paddle Inference on CPU with oneDNN, shaped like an onnxruntime call: images -> logits."""

    def __init__(self, model_dir: Path, int8: bool, threads: int):
        config = paddle_infer.Config(str(model_dir / "model.pdmodel"), str(model_dir / "model.pdiparams"))
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        config.switch_ir_optim(True)
        config.enable_onednn()
        if int8:
            config.enable_onednn_int8()
        config.disable_glog_info()
        self.predictor = paddle_infer.create_predictor(config)
        self.input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self.output = self.predictor.get_output_handle(self.predictor.get_output_names()[0])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        self.input.reshape(list(images.shape))
        self.input.copy_from_cpu(np.ascontiguousarray(images))
        self.predictor.run()
        return self.output.copy_to_cpu()


def runner(spec: dict, threads: int):
    if "onnx" in spec:
        model = session(spec["onnx"], threads)
        name = model.get_inputs()[0].name
        return lambda images: model.run(None, {name: images})[0]
    return PaddleRunner(spec["paddle"], spec["int8"], threads)


def predict(run, images: np.ndarray, batch: int) -> np.ndarray:
    return np.concatenate([run(images[i : i + batch]) for i in range(0, len(images), batch)]).argmax(axis=1)


def time_variants(runners: dict, batch: np.ndarray, repeats: int, rounds: int) -> dict[str, list[list[float]]]:
    """Wall time per call, per round. Each variant runs in its own block, once per round, with a pause
    between blocks: onnxruntime's and Paddle's (OpenMP) worker threads spin-wait after a call, and
    interleaving calls would time one runtime while the other's threads still hold the cores. Odd
    rounds run the variants in reverse order, so no variant always follows the same one."""
    timings = {name: [] for name in runners}
    per_round = max(1, -(-repeats // rounds))
    for round_index in range(rounds):
        order = list(runners) if round_index % 2 == 0 else list(reversed(runners))
        for name in order:
            run, block = runners[name], []
            time.sleep(SETTLE_S)
            for _ in range(WARMUP):
                run(batch)
            for _ in range(per_round):
                started = time.perf_counter()
                run(batch)
                block.append((time.perf_counter() - started) * 1e3)
            timings[name].append(block)
    return timings


def paired_ratio(theirs: list[list[float]], ours: list[list[float]], resamples: int = 2000) -> dict:
    """Their/our median time, round by round (both timed in the same round), with a bootstrap 95% CI.

    A ratio above 1 means ours is faster. On a shared 2-core machine a single median moves by 10-20 %
    between runs; pairing the rounds removes the drift both variants share.
    """
    ratios = np.array([np.median(a) / np.median(b) for a, b in zip(theirs, ours)])
    draws = np.random.default_rng(0).choice(ratios, size=(resamples, len(ratios)))
    low, high = np.percentile(np.median(draws, axis=1), [2.5, 97.5])
    return {"median": float(np.median(ratios)), "ci95": [float(low), float(high)], "rounds": len(ratios)}


def benchmark(work: Workload, specs: dict, batches: list[int], repeats: int, rounds: int, threads: int) -> list[dict]:
    runners = {name: runner(specs[name], threads) for name in VARIANTS}
    predictions = {name: predict(run, work.evaluation, 16) for name, run in runners.items()}
    rows = []
    for batch_size in batches:
        batch = np.ascontiguousarray(work.evaluation[np.arange(batch_size) % len(work.evaluation)])
        by_round = time_variants(runners, batch, repeats, rounds)
        timings = {name: [value for block in blocks for value in block] for name, blocks in by_round.items()}
        base = float(np.median(timings["ort_fp32"]))
        for name in VARIANTS:
            values = timings[name]
            spec = specs[name]
            size = spec["bytes"] if "bytes" in spec else spec["onnx"].stat().st_size
            row = {
                "model": work.name, "batch": batch_size, "variant": name, "threads": threads,
                "repeats": len(values), "rounds": rounds,
                "latency_ms_p50": float(np.median(values)), "latency_ms_p10": float(np.percentile(values, 10)),
                "latency_ms_p90": float(np.percentile(values, 90)), "bytes": int(size),
                "speedup_vs_ort_fp32": base / float(np.median(values)),
                "size_vs_ort_fp32": size / specs["ort_fp32"]["onnx"].stat().st_size,
                "agreement_with_ort_fp32": float(np.mean(predictions[name] == predictions["ort_fp32"])),
            }
            if name != "quantgate_int8":
                row["their_over_quantgate_time_paired"] = paired_ratio(by_round[name], by_round["quantgate_int8"])
            if work.labels is not None:
                row["top1_pct"] = float(100 * np.mean(predictions[name] == work.labels))
            rows.append(row)
    return rows


def targets(rows: list[dict]) -> list[dict]:
    """The issue's targets, each with what this run measured."""
    find = {(r["model"], r["batch"], r["variant"]): r for r in rows}
    checks = []

    def check(text: str, measured: float, met: bool) -> None:
        checks.append({"target": text, "measured": round(measured, 4), "met": bool(met)})

    for model, floor in (("resnet18", 2.5), ("mobilenet_v2", 1.5)):
        if not any(r["model"] == model for r in rows):
            continue
        for batch in sorted({r["batch"] for r in rows if r["model"] == model}):
            ours = find[(model, batch, "quantgate_int8")]
            check(f"{model} b{batch}: quantgate_int8 >= {floor}x faster than ort_fp32",
                  ours["speedup_vs_ort_fp32"], ours["speedup_vs_ort_fp32"] >= floor)
            theirs = find[(model, batch, "ort_quantize_static")]
            paired = theirs["their_over_quantgate_time_paired"]
            low, high = paired["ci95"]
            # Met unless ours is measurably slower: the paired ratio's 95% CI lies wholly below 1.
            check(f"{model} b{batch}: quantgate_int8 at least as fast as ort_quantize_static (their/our time, "
                  f"paired over {paired['rounds']} rounds, 95% CI {low:.3f}-{high:.3f})", paired["median"], high >= 1.0)
            onednn = find[(model, batch, "paddle_int8_onednn")]
            checks.append({"target": f"{model} b{batch}: ratio to Paddle oneDNN INT8 (their/our time), reported",
                           "measured": round(onednn["latency_ms_p50"] / ours["latency_ms_p50"], 4), "met": None})
        ours = next(r for r in rows if r["model"] == model and r["variant"] == "quantgate_int8")
        check(f"{model}: quantgate_int8 file <= 27% of FP32", ours["size_vs_ort_fp32"], ours["size_vs_ort_fp32"] <= 0.27)
    digits = [r for r in rows if r["model"] == "digits_cnn"]
    if digits:
        ours = next(r for r in digits if r["variant"] == "quantgate_int8")
        raw = next(r for r in digits if r["variant"] == "paddle2onnx_int8")
        gap = abs(ours["top1_pct"] - raw["top1_pct"])
        check("digits: quantgate_int8 top-1 within 0.5 pts of paddle2onnx_int8 (gap, pts)", gap, gap <= 0.5)
        check("digits: quantgate_int8 agreement with FP32 >= 99%", ours["agreement_with_ort_fp32"],
              ours["agreement_with_ort_fp32"] >= 0.99)
    return checks


def markdown(result: dict) -> str:
    lines = [f"# INT8 on CPU: {result['command']}", "",
             f"{result['machine']}; onnxruntime {result['versions']['onnxruntime']}, paddlepaddle "
             f"{result['versions']['paddlepaddle']}; {result['threads']} threads; {result['repeats']} timed runs per cell "
             f"in {result['rounds']} blocks per variant (variants in turn, order reversed every other round). "
             + result["noise_note"], ""]
    for name, note in result["data"].items():
        lines.append(f"- **{name}**: {note}")
    lines += ["", "| model | batch | variant | median ms | p10-p90 ms | size MB | speedup vs ORT FP32 | size vs FP32 "
              "| agreement with FP32 | top-1 % |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        top1 = f"{r['top1_pct']:.2f}" if "top1_pct" in r else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['variant']} | {r['latency_ms_p50']:.2f} | "
                     f"{r['latency_ms_p10']:.2f}-{r['latency_ms_p90']:.2f} | {r['bytes'] / 1e6:.2f} | "
                     f"{r['speedup_vs_ort_fp32']:.2f}x | {100 * r['size_vs_ort_fp32']:.0f}% | "
                     f"{r['agreement_with_ort_fp32']:.4f} | {top1} |")
    lines += ["", "| target | measured | met |", "|---|---:|---|"]
    for t in result["targets"]:
        met = "reported" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    lines += ["", "quantgate_int8 graph as onnxruntime runs it:", ""]
    for name, ops in result["quantgate_int8_runtime_ops"].items():
        lines.append(f"- {name}: {ops}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the JSON and Markdown")
    parser.add_argument("--models", nargs="+", default=[*VISION_MODELS, "digits_cnn"],
                        choices=[*VISION_MODELS, "digits_cnn"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=60, help="timed runs per variant and batch size")
    parser.add_argument("--rounds", type=int, default=12, help="blocks per variant the repeats are split into, in turn")
    parser.add_argument("--calibration-images", type=int, default=32, help="synthetic images for the vision models")
    args = parser.parse_args(argv)

    started = time.time()
    rows, data, runtime_ops = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="quantgate-bench-") as scratch:
        for name in args.models:
            folder = Path(scratch) / name
            print(f"[{time.time() - started:6.1f} s] {name}: building models", flush=True)
            work = (digits_workload(folder) if name == "digits_cnn"
                    else vision_workload(name, folder, args.calibration_images, 64))
            specs = build_models(work, QuantizeConfig(batch_size=8) if name != "digits_cnn" else QuantizeConfig())
            runtime_ops[name] = runtime_op_counts(specs["quantgate_int8"]["onnx"])["ops"]
            print(f"[{time.time() - started:6.1f} s] {name}: timing", flush=True)
            rows += benchmark(work, specs, args.batches, args.repeats, args.rounds, args.threads)
            data[name] = work.data_note
    result = {
        "command": "python benchmarks/int8_onnx.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "versions": {"onnxruntime": ort.__version__, "paddlepaddle": paddle.__version__},
        "threads": args.threads, "repeats": args.repeats, "rounds": args.rounds,
        "noise_note": "Timings on a shared machine are noisy; rerun on a quiet one before quoting them.",
        "data": data, "rows": rows, "targets": targets(rows), "quantgate_int8_runtime_ops": runtime_ops,
        "wall_s": round(time.time() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "int8_onnx.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(result)
    (args.out / "int8_onnx.md").write_text(table)
    print(table)
    print(f"wrote {args.out / 'int8_onnx.json'} and {args.out / 'int8_onnx.md'} in {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
