"""What one PaddleSlim "hist" calibration of PP-OCRv4's recognizer costs, before and after quantize/calibration.py.

    python benchmarks/calibration_cost.py                       # 256 lines, batch 32: PaddleSlim's run is long
    python benchmarks/calibration_cost.py --lines 64            # a quick look
    python benchmarks/calibration_cost.py --skip-paddleslim     # the new calibration only (scales not compared)
    python benchmarks/calibration_cost.py --skip-fresh          # no fresh run to check the reused run against

On N Chinese financial text lines rendered with a CJK font (tests/support/ocr_samples.py, seed 1), preprocessed
as PaddleOCR does (3x48x320, /255, -0.5, /0.5), it times in one process:

  paddleslim     quant_post_static(algo='hist') as quantgate ran it before (paddle's PostTrainingQuantization)
  cold           quantgate's Calibration, no statistics: both passes (histogram="exact")
  one_pass       the same, histogram="one_pass" (quantgate's default): one forward pass, fine bins
  reused         Calibration with another hist_percent, given the cold run's statistics: no forward pass
  reused_fresh   the same hist_percent measured afresh, to check the reused run's scales against

and prints a Markdown table: seconds per phase (forward runs of the executor, measuring statistics, thresholds,
rewriting the program, saving), the largest relative difference of any saved scale from PaddleSlim's (or from
the fresh run, for 'reused'), whether the parameters file is byte-identical, and the CPU's flags.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

import paddle  # noqa: E402
from paddle.static.quantization import PostTrainingQuantization  # noqa: E402
from paddleslim.quant import quant_post_static  # noqa: E402
from support.ocr_samples import REC_SHAPE, model_inputs, paddleocr_models, render_financial_lines  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.int8.static_graph import static_mode  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.stages.quantize.calibration import Calibration  # noqa: E402

QUANTIZABLE = ["conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2"]
PHASES = {  # PostTrainingQuantization's steps, timed where both classes run them
    "statistics_s": ("_collect_activation_abs_min_max", "_sample_histogram"),
    "thresholds_s": ("_calculate_kl_hist_threshold",),
    "program_s": ("_update_program", "_save_output_threshold"),
    "save_s": ("save_quantized_model",),
}


class TimedExecutor(paddle.static.Executor):
    """Counts the seconds of runs that feed a calibration batch."""

    def __init__(self, place):
        super().__init__(place)
        self.forward_s, self.forward_runs = 0.0, 0

    def run(self, *args, feed=None, **kwargs):
        started = time.perf_counter()
        try:
            return super().run(*args, feed=feed, **kwargs)
        finally:
            if feed:
                self.forward_s += time.perf_counter() - started
                self.forward_runs += 1


@contextmanager
def timed_phases(seconds: dict[str, float]):
    """Time PostTrainingQuantization's steps (PHASES) into `seconds`, for every instance, while the block runs."""
    saved = {}
    for phase, methods in PHASES.items():
        for name in methods:
            original = saved[name] = getattr(PostTrainingQuantization, name)

            def wrapper(self, *args, _original=original, _phase=phase, **kwargs):
                started = time.perf_counter()
                try:
                    return _original(self, *args, **kwargs)
                finally:
                    seconds[_phase] = seconds.get(_phase, 0.0) + time.perf_counter() - started
            setattr(PostTrainingQuantization, name, wrapper)
    try:
        yield seconds
    finally:
        for name, original in saved.items():
            setattr(PostTrainingQuantization, name, original)


def arguments(model: Path, images: np.ndarray, batch: int, hist_percent: float) -> dict:
    batches = len(images) // batch
    return dict(model_dir=str(model), data_loader=lambda: ({"x": images[i * batch: (i + 1) * batch]}
                                                          for i in range(batches)),
                model_filename="inference.pdmodel", params_filename="inference.pdiparams", batch_size=batch,
                batch_nums=batches, algo="hist", hist_percent=hist_percent, onnx_format=True)


def run(kind: str, model: Path, images: np.ndarray, batch: int, hist_percent: float, out: Path, statistics=None,
        histogram: str = "exact"):
    """One calibration, saved to `out`: (seconds by phase, the Calibration or None)."""
    seconds: dict[str, float] = {}
    with static_mode():
        scope = paddle.static.Scope()
        executor = TimedExecutor(paddle.CPUPlace())
        calibration = None
        started = time.perf_counter()
        with paddle.static.scope_guard(scope), timed_phases(seconds):
            settings = arguments(model, images, batch, hist_percent)
            if kind == "paddleslim":
                quant_post_static(executor=executor, quantize_model_path=str(out), scope=scope, **settings)
            else:
                settings["quantizable_op_type"] = QUANTIZABLE  # quant_post_static's list; paddle's default is shorter
                calibration = Calibration(executor=executor, scope=scope, statistics=statistics, histogram=histogram,
                                          **settings)
                calibration.quantize()
                calibration.save_quantized_model(str(out), model_filename="model.pdmodel")
                seconds["statistics_s"] = calibration.statistics_s
        seconds["total_s"] = time.perf_counter() - started
    seconds["forward_s"] = executor.forward_s
    seconds["forward_batches"] = executor.forward_runs
    return seconds, calibration


def scales(folder: Path) -> dict[str, np.ndarray]:
    with static_mode():
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            program, _, _ = paddle.static.load_inference_model(str(folder / "model"),
                                                               paddle.static.Executor(paddle.CPUPlace()))
            return {var.name: np.array(scope.find_var(var.name).get_tensor()) for var in program.list_vars()
                    if var.persistable and var.name.endswith("@scale")}


def compare(folder: Path, reference: Path) -> tuple[str, str]:
    """(max relative difference of the scales, whether the params files are byte-identical)."""
    ours, theirs = scales(folder), scales(reference)
    if set(ours) != set(theirs):
        return f"scale sets differ ({len(set(ours) ^ set(theirs))} names)", "no"
    worst = max(float(np.max(np.abs(ours[name] - theirs[name]) / np.maximum(np.abs(theirs[name]), 1e-30)))
                for name in theirs)
    same = (folder / "model.pdiparams").read_bytes() == (reference / "model.pdiparams").read_bytes()
    return f"{worst:.3g} ({len(theirs)} scales)", "yes" if same else "no"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hist-percent", type=float, default=0.9999)
    parser.add_argument("--second-hist-percent", type=float, default=0.99999)
    parser.add_argument("--skip-paddleslim", action="store_true", help="time the new calibration only")
    parser.add_argument("--skip-fresh", action="store_true", help="no fresh run to check the reused run's scales")
    args = parser.parse_args()

    model = paddleocr_models().rec
    with tempfile.TemporaryDirectory(prefix="calibration-cost-") as work:
        work = Path(work)
        entries = render_financial_lines(work / "lines", args.lines, seed=1)
        images = model_inputs([work / "lines" / path for path, _ in entries], REC_SHAPE)
        rows = {}
        if not args.skip_paddleslim:
            rows["paddleslim"], _ = run("paddleslim", model, images, args.batch_size, args.hist_percent,
                                        work / "paddleslim")
        rows["cold"], cold = run("cold", model, images, args.batch_size, args.hist_percent, work / "cold")
        rows["one_pass"], _ = run("one_pass", model, images, args.batch_size, args.hist_percent, work / "one_pass",
                                  histogram="one_pass")
        rows["reused"], _ = run("reused", model, images, args.batch_size, args.second_hist_percent, work / "reused",
                                statistics=cold.statistics)
        if not args.skip_fresh:
            rows["reused_fresh"], _ = run("fresh", model, images, args.batch_size, args.second_hist_percent,
                                          work / "reused_fresh")
        versus = {"cold": "paddleslim", "one_pass": "cold", "reused": "reused_fresh", "reused_fresh": None,
                  "paddleslim": None}
        compared = {name: (compare(work / name, work / versus[name]) if versus[name] in rows else ("-", "-"))
                    for name in rows}

    cpu = cpu_record()
    print(f"PP-OCRv4 rec, {len(images)} rendered lines {REC_SHAPE}, batch {args.batch_size}, algo hist "
          f"(hist_percent {args.hist_percent}; reused: {args.second_hist_percent}); paddle {paddle.__version__}, "
          f"numpy {np.__version__}; CPU {cpu['model']}, flags: {', '.join(cpu['flags']) or 'none of interest'}\n")
    columns = ("forward_batches", "forward_s", "statistics_s", "thresholds_s", "program_s", "save_s", "total_s")
    print("| run | " + " | ".join(columns) + " | scales' max rel. diff (vs) | params identical |")
    print("|---|" + "---:|" * len(columns) + "---|---|")
    for name, seconds in rows.items():
        cells = [f"{seconds.get(column, 0.0):.0f}" if column == "forward_batches" else f"{seconds.get(column, 0.0):.1f}"
                 for column in columns]
        difference, identical = compared[name]
        against = f" ({versus[name]})" if versus[name] in rows else ""
        print(f"| {name} | " + " | ".join(cells) + f" | {difference}{against} | {identical} |")


if __name__ == "__main__":
    main()
