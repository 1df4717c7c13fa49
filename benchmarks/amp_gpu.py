"""GPU proof of mixed precision: throughput, peak memory, final loss and op precision at O0, O1 and O2.

    python benchmarks/amp_gpu.py                       # both models, every level and dtype the GPU supports
    python benchmarks/amp_gpu.py --models resnet50 --steps 50 --json-out amp_gpu.json

Trains the pipeline's default model (digits_cnn, on the real 8x8 digits) and ResNet50
(paddle.vision.models.resnet50 on synthetic 224x224 images) for a fixed number of steps per
setting: O0 (float32), then O1 and O2 in float16, and in bfloat16 where
`paddle.amp.is_bfloat16_supported()`. Each setting uses the pipeline's own AMP helpers
(quantgate.stages.train.amp) and Paddle's documented loop: auto_cast -> scaler.scale(loss).backward()
-> scaler.step -> scaler.update. Timing starts after warm-up steps and is bracketed by
`paddle.device.synchronize()`. Prints a table, then the same numbers as JSON.

Exits with code 2 and says why when Paddle is not a CUDA build or no GPU is visible:
AMP does nothing on a CPU, so there would be nothing to measure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext

import numpy as np
import paddle
import paddle.nn.functional as F

import quantgate  # noqa: F401  (sets Paddle flags before paddle loads)
from quantgate.config import AmpConfig
from quantgate.models.models import build_model
from quantgate.stages.train import amp
from quantgate.stages.train.op_precision import op_precision_record, operator_stats

NO_GPU_EXIT = 2


def cuda_problem() -> str | None:
    """Why this process cannot benchmark AMP on a GPU, or None when it can."""
    if not paddle.device.is_compiled_with_cuda():
        return (f"this Paddle ({paddle.__version__}) is not a CUDA build, so AMP cannot run here; install "
                "paddlepaddle-gpu (see 'GPU proof' in the README) and run on a machine with an NVIDIA GPU")
    if paddle.device.cuda.device_count() < 1:
        return "Paddle is a CUDA build but sees no GPU; check nvidia-smi, CUDA_VISIBLE_DEVICES and the container's --gpus flag"
    return None


def settings(include_bfloat16: bool) -> list[tuple[str, str | None]]:
    """(level, dtype) pairs to measure; O0 is float32 without auto_cast."""
    pairs = [("O0", None), ("O1", "float16"), ("O2", "float16")]
    if include_bfloat16:
        pairs += [("O1", "bfloat16"), ("O2", "bfloat16")]
    return pairs


def model_and_data(name: str, batch_size: int, rng: np.random.Generator):
    if name == "digits_cnn":
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = (digits.images / 16.0).astype(np.float32)[:, None]
        labels = digits.target.astype(np.int64)
        pick = rng.integers(0, len(labels), batch_size)
        return build_model("digits_cnn", 10, (1, 8, 8)), images[pick], labels[pick]
    if name == "resnet50":
        images = rng.standard_normal((batch_size, 3, 224, 224), dtype=np.float32)
        return paddle.vision.models.resnet50(num_classes=1000), images, rng.integers(0, 1000, batch_size)
    raise ValueError(f"unknown model {name!r}; choose digits_cnn or resnet50")


def measure(name: str, level: str, dtype: str | None, steps: int, warmup: int, batch_size: int) -> dict:
    """Train `name` for warmup + steps steps at one setting; throughput counts the timed steps only."""
    paddle.seed(0)
    model, images, labels = model_and_data(name, batch_size, np.random.default_rng(0))
    optimizer = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, parameters=model.parameters(),
                                          multi_precision=level == "O2")
    config = AmpConfig(enabled=level != "O0", level="O2" if level == "O2" else "O1", dtype=dtype or "float16")
    model, optimizer = amp.decorate(model, optimizer, config)
    # bfloat16 has float32's exponent range, so it needs no loss scaling
    scaler = amp.grad_scaler(config.model_copy(update={"enabled": config.enabled and dtype == "float16"}))
    x, y = paddle.to_tensor(images), paddle.to_tensor(labels)
    if hasattr(paddle.device.cuda, "reset_max_memory_allocated"):
        paddle.device.cuda.reset_max_memory_allocated()
    model.train()
    ops, loss, started = {}, None, 0.0
    for step in range(warmup + steps):
        if step == warmup:
            paddle.device.synchronize()
            started = time.perf_counter()
        with operator_stats() if step == 0 else nullcontext() as counted:
            with amp.autocast(config):
                loss = F.cross_entropy(model(x), y)
        if step == 0:
            ops = counted
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.clear_grad()
    paddle.device.synchronize()
    seconds = time.perf_counter() - started
    record = op_precision_record(ops, bool(config.enabled), "", paddle.get_device())
    return {
        "model": name,
        "level": level,
        "dtype": dtype or "float32",
        "batch_size": batch_size,
        "timed_steps": steps,
        "samples_per_second": batch_size * steps / seconds,
        "peak_memory_mib": paddle.device.cuda.max_memory_allocated() / 2**20,
        "final_loss": float(loss.astype("float32")),
        "final_loss_scale": amp.loss_scale(scaler),
        "low_precision_op_calls": record["calls"]["float16"] + record["calls"]["bfloat16"],
        "float32_op_calls": record["calls"]["float32"],
        "low_precision_ops": record["low_precision_ops"],
    }


def pipeline_check(level: str, dtype: str, clip_norm: float) -> dict:
    """Run the pipeline's own train stage on the GPU for one epoch and return what it recorded.

    Shows on a real GPU what the CPU suite cannot: the scaler enabled, its scale and skipped steps
    accounted, clipping applied to unscaled gradients, and the ops that ran in low precision.
    """
    import csv
    import tempfile
    from pathlib import Path

    from quantgate.config import DataConfig, TrainConfig
    from quantgate.stages.data.splits import prepare_data
    from quantgate.stages.train.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prepare_data(DataConfig(), folder)
        config = TrainConfig(epochs=1, grad_clip_norm=clip_norm, amp={"level": level, "dtype": dtype})
        result = train(config, folder / "splits.npz", folder)
        with open(folder / "steps.csv") as handle:
            rows = list(csv.DictReader(handle))
        ops = json.loads((folder / "op_precision.json").read_text())
    metrics = result.metrics
    return {
        "level": level, "dtype": dtype, "amp_effective": metrics["amp"]["effective"],
        "weights_source": metrics["amp"]["weights_source"], "scaler": metrics["scaler"],
        "max_grad_norm_clipped": max(float(row["grad_norm_clipped"]) for row in rows),
        "grad_clip_norm": clip_norm, "low_precision_ops": ops["low_precision_ops"], "op_calls": ops["calls"],
    }


def print_table(results: list[dict]) -> None:
    header = f"{'model':<11} {'level':<5} {'dtype':<9} {'samples/s':>11} {'peak MiB':>9} {'final loss':>10} " \
             f"{'low-prec/fp32 op calls':>23}  speed-up vs O0"
    print(header)
    print("-" * len(header))
    baseline = {r["model"]: r["samples_per_second"] for r in results if r["level"] == "O0"}
    for r in results:
        print(f"{r['model']:<11} {r['level']:<5} {r['dtype']:<9} {r['samples_per_second']:>11.1f} "
              f"{r['peak_memory_mib']:>9.1f} {r['final_loss']:>10.4f} "
              f"{r['low_precision_op_calls']:>11}/{r['float32_op_calls']:<11}  "
              + (f"x{r['samples_per_second'] / baseline[r['model']]:.2f}" if r["model"] in baseline else "-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["digits_cnn", "resnet50"], choices=["digits_cnn", "resnet50"])
    parser.add_argument("--steps", type=int, default=100, help="timed steps per setting")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (kernel selection, allocator)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json-out", help="also write the results to this file")
    args = parser.parse_args(argv)
    problem = cuda_problem()
    if problem:
        print(f"amp_gpu: {problem}", file=sys.stderr)
        return NO_GPU_EXIT
    paddle.set_device("gpu")
    bf16 = bool(paddle.amp.is_bfloat16_supported())
    results = []
    for name in args.models:
        for level, dtype in settings(bf16):
            results.append(measure(name, level, dtype, args.steps, args.warmup, args.batch_size))
            print(f"# {name} {level} {dtype or 'float32'}: {results[-1]['samples_per_second']:.1f} samples/s",
                  file=sys.stderr)
    checks = [pipeline_check(level, dtype, clip_norm=1.0)
              for level, dtype in settings(bf16) if level != "O0"]
    print(f"# {paddle.device.cuda.get_device_name()}, Paddle {paddle.__version__}, bfloat16 supported: {bf16}")
    print_table(results)
    print("\n# the pipeline's train stage, 1 epoch of digits, grad_clip_norm=1.0")
    for check in checks:
        scaler = check["scaler"]
        print(f"{check['level']} {check['dtype']:<9} effective={check['amp_effective']} "
              f"scale {scaler['initial_scale']:g}->{scaler['final_scale']:g} (min {scaler['min_scale']:g}) "
              f"skipped {scaler['skipped_steps']}/{scaler['steps']} max clipped norm "
              f"{check['max_grad_norm_clipped']:.4f} weights={check['weights_source']} "
              f"low-precision ops: {', '.join(check['low_precision_ops']) or 'none'}")
    document = {"device": paddle.device.cuda.get_device_name(), "paddle": paddle.__version__,
                "bfloat16_supported": bf16, "results": results, "pipeline_checks": checks}
    print(json.dumps(document, indent=2, sort_keys=True))
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(document, handle, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
