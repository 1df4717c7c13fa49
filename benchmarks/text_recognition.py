"""Text-line recognition through the whole pipeline: FP32 vs INT8 line accuracy, CER, agreement and latency.

    python benchmarks/text_recognition.py --out benchmarks/results      # ~5 min on 2 cores

Runs `quantgate run --config examples/ocr-digit-strings.yaml` on a fresh store (timed: the whole run,
Prefect's server included), then reads the version it made: the evaluate stage's line accuracy, character
error rate and agreement of FP32 and INT8 in onnxruntime, the model sizes and the train stage's time.
Latency is measured again at batch 1 and 16 on test lines, in a process of its own
(quantgate/runtimes/latency.py, fixed threads), FP32 and INT8 taking turns. Writes text_recognition.json/.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ocr-digit-strings.yaml"
TARGETS = "INT8 line accuracy within 1 pt of FP32, CER increase <= 0.5 pts, INT8 faster at batch 1 and 16, run < 5 min"


def cpu_flags() -> list[str]:
    flags = Path("/proc/cpuinfo").read_text().split()
    return sorted({flag for flag in flags if flag.startswith("amx") or flag in ("avx512_vnni", "avx512f", "avx2")})


def run_example(config: Path, store: Path) -> tuple[float, Path]:
    """The whole example run on a fresh store: its wall time and the version folder it wrote."""
    quantgate = str(Path(sys.executable).with_name("quantgate"))
    started = time.perf_counter()
    done = subprocess.run([quantgate, "run", "--config", str(config)], env={**os.environ, "QUANTGATE_STORE": str(store)},
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: the gate refused; the run itself worked
        raise SystemExit(f"quantgate run exited {done.returncode}:\n{done.stderr[-3000:]}")
    print(done.stdout)
    versions = sorted((store).glob("*/versions/v1"))
    if len(versions) != 1:
        raise SystemExit(f"expected one version under {store}, found {versions}")
    return wall, versions[0]


def latency(version: Path, threads: int, repeats: int) -> dict:
    """Median ms per call of FP32 and INT8 in onnxruntime at batch 1 and 16, on test lines."""
    from quantgate.runtimes.latency import measure
    from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
    from quantgate.stages.data import open_data

    images, _ = open_data(version / "data").array("test", limit=16)
    models = {"fp32": version / "convert" / FP32_FILE, "int8": version / "convert" / INT8_FILE}
    rows = {}
    for batch in (1, 16):
        timed = measure(models, images[:batch], threads, repeats, int8=("int8",))
        rows[batch] = {"fp32_ms": timed["fp32"]["p50"], "int8_ms": timed["int8"]["p50"],
                       "speedup": timed["fp32"]["p50"] / timed["int8"]["p50"]}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--config", type=Path, default=EXAMPLE)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = Path(tempfile.mkdtemp(prefix="text-recognition-", dir=args.out.resolve()))
    wall, version = run_example(args.config.resolve(), store)
    evaluation = json.loads((version / "evaluate" / "manifest.json").read_text())["metrics"]
    trained = json.loads((version / "train" / "manifest.json").read_text())["metrics"]
    gate = json.loads((version / "version.json").read_text()).get("status")
    timed = latency(version, args.threads, args.repeats)
    result = {
        "machine": {"cpu_flags": cpu_flags(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "config": str(args.config), "run_wall_s": wall, "gate": gate,
        "train_seconds": trained["train_seconds"], "test_lines": evaluation["test_samples"],
        **{key: evaluation.get(key) for key in ("fp32_top1_pct", "int8_top1_pct", "accuracy_delta_pts",
                                                  "fp32_cer_pct", "int8_cer_pct", "cer_increase_pts", "agreement",
                                                  "model_bytes_fp32", "model_bytes_int8")},
        "latency_ms": timed, "threads": args.threads,
    }
    result["targets_met"] = {
        "line_accuracy_within_1pt": result["accuracy_delta_pts"] >= -1.0,
        "cer_increase_le_0.5pts": result["cer_increase_pts"] <= 0.5,
        "int8_faster_b1_and_b16": all(row["speedup"] > 1 for row in timed.values()),
        "run_under_5_min": wall < 300,
    }
    (args.out / "text_recognition.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    lines = [
        f"digit_strings, {result['test_lines']} test lines; CPU flags: {' '.join(result['machine']['cpu_flags'])}; "
        f"{args.threads} threads; whole run {wall:.0f} s (train {result['train_seconds']:.0f} s), gate {gate}",
        "",
        "| | FP32 | INT8 | INT8 - FP32 |",
        "|---|---:|---:|---:|",
        f"| line accuracy % | {result['fp32_top1_pct']:.2f} | {result['int8_top1_pct']:.2f} | "
        f"{result['accuracy_delta_pts']:+.2f} pts |",
        f"| CER % | {result['fp32_cer_pct']:.2f} | {result['int8_cer_pct']:.2f} | {result['cer_increase_pts']:+.2f} pts |",
        *(f"| latency ms, batch {batch} | {row['fp32_ms']:.2f} | {row['int8_ms']:.2f} | {row['speedup']:.2f}x |"
          for batch, row in timed.items()),
        f"| model KiB | {result['model_bytes_fp32'] / 1024:.0f} | {result['model_bytes_int8'] / 1024:.0f} | "
        f"{result['model_bytes_int8'] / result['model_bytes_fp32']:.0%} |",
        "",
        f"agreement (identical FP32 and INT8 strings): {result['agreement']:.4f}",
        f"targets ({TARGETS}): " + ", ".join(f"{name} {'met' if ok else 'MISSED'}"
                                             for name, ok in result["targets_met"].items()),
    ]
    (args.out / "text_recognition.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
