"""Plain PTQ vs the accuracy-aware search vs onnxruntime's quantize_static, on models trained here.

    python benchmarks/int8_search.py --out benchmarks/results        # ~30-45 min on 2 cores

For MobileNetV2 and ResNet18 (paddle.vision), trained briefly (each of --epochs) on a folder dataset
(scikit-learn's 1,797 real handwritten digits written as RGB PNG files, one sub-folder per class,
upscaled to --size; validation split --validation-fraction), and for the pipeline's default digits
CNN, it runs the project's own stages:

  plain_ptq             quantize.strategy 'single' (PaddleSlim with quantize's settings), lowered
  searched              quantize.strategy 'search' against the policy (--max-drop, default 0.5 pts)
  ort_quantize_static   onnxruntime's quantize_static on the FP32 ONNX, QDQ, uint8 activations,
                        int8 per-channel weights, calibrated on the same calibration split

and evaluates each with the evaluate stage on the test split (which the search never sees): top-1,
delta vs FP32, agreement, latency (median of --latency-repeats runs, FP32 and all variants timed
in turns in one process, batch 1 and 16) and speedup vs FP32. It writes int8_search.json and int8_search.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import paddle
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from PIL import Image
from sklearn.datasets import load_digits

import quantgate  # noqa: F401  (legacy program format for PaddleSlim, before paddle is imported)
from quantgate.config import EvaluateConfig, GatePolicy, PipelineConfig, validate_config
from quantgate.runtimes.latency import measure
from quantgate.stages.convert.onnx_export import convert
from quantgate.stages.data import open_data, prepare_data
from quantgate.stages.evaluate.accuracy import evaluate
from quantgate.stages.export.inference_model import export
from quantgate.stages.export.outputs import MODEL_FILE, PARAMS_FILE
from quantgate.stages.quantize.ptq import quantize
from quantgate.stages.quantize.search import search_quantization
from quantgate.stages.train.loop import train

VARIANTS = ("plain_ptq", "searched", "ort_quantize_static")


def write_digits_folder(root: Path) -> Path:
    """scikit-learn's digits as 8-bit RGB PNGs (16 grey levels stretched to 0-255), one folder per class."""
    digits = load_digits()
    for index, (image, label) in enumerate(zip(digits.images, digits.target)):
        folder = root / f"digit_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (image * 255 / 16).astype(np.uint8)
        Image.fromarray(pixels, "L").convert("RGB").save(folder / f"{index:04d}.png")
    return root


class Reader(CalibrationDataReader):
    def __init__(self, images: np.ndarray, batch: int):
        self.batches = iter([{"x": images[i : i + batch]} for i in range(0, len(images), batch)])

    def get_next(self):
        return next(self.batches, None)


def pipeline_config(architecture: str, folder: Path | None, size: int, epochs: int, max_drop: float,
                    validation_fraction: float = 0.1) -> PipelineConfig:
    raw: dict = {"train": {"architecture": architecture, "epochs": epochs},
                 "gate": {"max_accuracy_drop": max_drop}}
    if folder is not None:
        raw["data"] = {"dataset": "image_folder", "path": str(folder), "validation_fraction": validation_fraction,
                       "transforms": {"resize": size, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}
        raw["train"]["batch_size"] = 32
    else:
        raw["train"].pop("epochs")  # the default pipeline, as `quantgate run` trains it
    return validate_config(raw)


def run_model(name: str, config: PipelineConfig, work: Path, latency_repeats: int, log) -> dict:
    dirs = {stage: work / stage for stage in ("data", "train", "export")}
    for folder in dirs.values():
        folder.mkdir(parents=True)
    splits = dirs["data"]  # the data stage's folder, which every stage opens
    prepare_data(config.data, dirs["data"])
    log(f"{name}: training {config.train.epochs} epochs")
    trained = train(config.train, splits, dirs["train"])
    export(dirs["train"] / "weights.npz", dirs["train"] / "reference_logits.npy", splits,
           trained.metrics["architecture"], dirs["export"])
    data = open_data(splits)
    models, extra = {}, {}
    for variant in ("plain_ptq", "searched"):
        quantized, converted = work / variant / "quantize", work / variant / "convert"
        quantized.mkdir(parents=True)
        converted.mkdir()
        started = time.time()
        log(f"{name}: {variant}")
        if variant == "plain_ptq":
            result = quantize(config.quantize.model_copy(update={"strategy": "single"}), dirs["export"], MODEL_FILE,
                              PARAMS_FILE, splits, quantized)
        else:
            result = search_quantization(config.quantize, config.gate, config.evaluate, dirs["export"], splits,
                                         quantized)
            extra["search"] = result.metrics["search"]
        convert(dirs["export"], quantized, MODEL_FILE, PARAMS_FILE, converted)
        extra[f"{variant}_quantize_s"] = time.time() - started
        models[variant] = converted / "int8.onnx"
    fp32 = work / "plain_ptq" / "convert" / "fp32.onnx"
    quant_pre_process(str(fp32), str(work / "fp32_pre.onnx"), skip_symbolic_shape=True)
    quantize_static(str(work / "fp32_pre.onnx"), str(work / "ort_quantize_static.onnx"),
                    Reader(data.array("calibration")[0], 32), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    models["ort_quantize_static"] = work / "ort_quantize_static.onnx"

    # FP32 and every variant timed in one process per batch size, in rounds, so each speedup divides by
    # the same FP32 timing (separate processes drift by more than the differences between variants here).
    timed = {batch: measure({"fp32": fp32, **models}, data.array("test", limit=batch)[0], 2, latency_repeats) for batch in (1, 16)}
    rows = []
    for variant, int8 in models.items():
        out = work / variant / "evaluate"
        out.mkdir(parents=True, exist_ok=True)
        metrics = evaluate(EvaluateConfig(latency_repeats=3), fp32, int8, splits, out).metrics
        latency = {batch: {"fp32": timed[batch]["fp32"], "int8": timed[batch][variant]} for batch in timed}
        rows.append({
            "model": name, "variant": variant, "test_samples": metrics["test_samples"],
            "fp32_top1_pct": metrics["fp32_top1_pct"], "int8_top1_pct": metrics["int8_top1_pct"],
            "accuracy_drop_pts": metrics["fp32_top1_pct"] - metrics["int8_top1_pct"],
            "agreement": metrics["agreement"],
            **{f"latency_ms_p50_{kind}_b{batch}": latency[batch][kind]["p50"] for batch in latency
               for kind in ("fp32", "int8")},
            **{f"speedup_b{batch}": latency[batch]["fp32"]["p50"] / latency[batch]["int8"]["p50"] for batch in latency},
            "model_bytes_int8": int8.stat().st_size,
            "meets_max_drop": metrics["fp32_top1_pct"] - metrics["int8_top1_pct"] <= config.gate.max_accuracy_drop,
        })
    return {"rows": rows, "search": extra.get("search"), "quantize_s": {k: v for k, v in extra.items() if k != "search"},
            "input_shape": list(data.input_shape), "samples": {split: data.size(split)
                                                               for split in ("train", "calibration", "validation", "test")}}


def markdown(result: dict) -> str:
    lines = [f"# Plain PTQ vs search vs onnxruntime: {result['command']}", "",
             f"{result['machine']}; onnxruntime {result['versions']['onnxruntime']}, paddlepaddle "
             f"{result['versions']['paddlepaddle']}; 2 threads; policy: max_accuracy_drop {result['max_drop']} pts "
             f"(judged on the validation split by the search; the table is the test split). {result['wall_s']} s in all.", ""]
    for name, model in result["models"].items():
        lines.append(f"- **{name}**: input {model['input_shape']}, splits {model['samples']}; {model['data']}")
    lines += ["", "| model | variant | FP32 top-1 % | INT8 top-1 % | drop (pts) | agreement | meets max drop | "
              "speedup b1 | speedup b16 | INT8 ms b1 | INT8 ms b16 | size MB |",
              "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for name, model in result["models"].items():
        for r in model["rows"]:
            lines.append(f"| {name} | {r['variant']} | {r['fp32_top1_pct']:.2f} | {r['int8_top1_pct']:.2f} | "
                         f"{r['accuracy_drop_pts']:+.2f} | {r['agreement']:.4f} | {'yes' if r['meets_max_drop'] else '**no**'} | "
                         f"{r['speedup_b1']:.2f}x | {r['speedup_b16']:.2f}x | {r['latency_ms_p50_int8_b1']:.2f} | "
                         f"{r['latency_ms_p50_int8_b16']:.2f} | {r['model_bytes_int8'] / 1e6:.2f} |")
    lines += ["", "| model | search verdict | trials | fall-back estimates | wall s | kept recipe | FP32 layers (latency cost) | stopped |",
              "|---|---|---:|---:|---:|---|---|---|"]
    for name, model in result["models"].items():
        s = model["search"]
        costs = ", ".join(f"{c['layer']} ({'n/a' if c['latency_cost_pct_of_fp32'] is None else format(c['latency_cost_pct_of_fp32'], '+.1f') + ' % of FP32'})"
                          for c in s["float_layer_costs"]) or "none"
        lines.append(f"| {name} | {'passed' if s['passed'] else 'nothing passed'} | {s['trials']} | "
                     f"{s.get('fallback_estimates', 0)} | {s['wall_s']:.0f} | "
                     f"{s['recipe']['algo']} (hist_percent {s['recipe']['hist_percent']}), bias_correction {s['recipe']['bias_correction']} | "
                     f"{costs} | {s['stopped']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18", "digits_cnn"],
                        choices=["mobilenet_v2", "resnet18", "digits_cnn"])
    parser.add_argument("--size", type=int, default=64, help="side of the folder images after resizing")
    parser.add_argument("--epochs", type=int, nargs="+", default=[3],
                        help="training epochs of the vision models; each value is a model of its own")
    parser.add_argument("--max-drop", type=float, default=0.5, help="gate.max_accuracy_drop the search aims for")
    parser.add_argument("--validation-fraction", type=float, default=0.2,
                        help="data.validation_fraction of the vision models: the split the search judges on "
                             "(0.2 = 360 images, as many as the test split; 180 images cannot resolve 0.5 points)")
    parser.add_argument("--latency-repeats", type=int, default=40)
    args = parser.parse_args(argv)
    started = time.time()
    log = lambda text: print(f"[{time.time() - started:7.1f} s] {text}", flush=True)  # noqa: E731
    models = {}
    with tempfile.TemporaryDirectory(prefix="quantgate-search-bench-") as scratch:
        folder = write_digits_folder(Path(scratch) / "digits_png")
        for name in args.models:
            vision = name != "digits_cnn"
            for epochs in args.epochs if vision else [None]:
                key = f"{name}_{epochs}ep" if vision and len(args.epochs) > 1 else name
                config = pipeline_config(name, folder if vision else None, args.size, epochs or 0, args.max_drop,
                                         args.validation_fraction)
                models[key] = run_model(key, config, Path(scratch) / key, args.latency_repeats, log)
                models[key]["data"] = (f"digits as {args.size}x{args.size} RGB PNG folder, {epochs} epochs" if vision
                                       else "built-in digits, default pipeline config")
    result = {
        "command": "python benchmarks/int8_search.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "versions": {"onnxruntime": ort.__version__, "paddlepaddle": paddle.__version__},
        "max_drop": args.max_drop, "models": models, "wall_s": round(time.time() - started, 1),
        "policy": GatePolicy(max_accuracy_drop=args.max_drop).model_dump(mode="json"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "int8_search.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(result)
    (args.out / "int8_search.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
