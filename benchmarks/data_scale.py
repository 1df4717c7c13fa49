"""Does the pipeline's cost grow with the number of images? Image folders of N files, whole `quantgate run`s.

    python benchmarks/data_scale.py --out benchmarks/results            # ~25 min on 2 cores

For each N (default 2,000 and 20,000 RGB 96x96 PNG files in 10 classes, written once under --out),
two `quantgate run`s on a fresh store with the same small model and epochs (digits_cnn on images
resized to 32x32, --epochs, strategy 'single', data.num_workers 2), each in its own process tree:

  peak_pss_mib          peak proportional set size of the whole run: the CLI, Prefect's server, the
                        DataLoader workers and every other child, sampled every 0.25 s (PSS, so pages
                        the workers share with their parent are counted once)
  store_bytes_v1        bytes of the first version's files; table_bytes of which the file table
  store_bytes_added_v2  bytes the rerun added (reused stages are hard links: no bytes)
  data_s_first / rerun  the data stage's wall time (its terminal line: scan, hashing and commit) on the first
                        run and on the rerun over the unchanged folder
  train_images_per_s    the train stage's throughput (its manifest)

and, at the smallest N, the train stage alone on the same split decoded into memory first (the
in-memory path this project had before) against the streaming path with 2 workers. Writes data_scale.json/.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import yaml
from PIL import Image

CLASSES = 10
SIZE = 96


def cpu_flags() -> list[str]:
    flags = Path("/proc/cpuinfo").read_text().split()
    return sorted({flag for flag in flags if flag.startswith("amx") or flag in ("avx512_vnni", "avx512f", "avx2")})


def write_folder(root: Path, count: int, seed: int = 0) -> Path:
    """`count` PNGs, one sub-folder per class: a class-coloured blob on noise, so the classes are learnable."""
    if (root / "done").exists():
        return root
    rng = np.random.default_rng(seed)
    hues = rng.integers(0, 255, (CLASSES, 3))
    for index in range(count):
        label = index % CLASSES
        pixels = rng.integers(0, 120, (SIZE, SIZE, 3))
        top, left = rng.integers(0, SIZE // 2, 2)
        pixels[top: top + SIZE // 2, left: left + SIZE // 2] = hues[label]
        folder = root / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{index:06d}.png")
    (root / "done").write_text("")
    return root


def config(images: Path, epochs: int) -> dict:
    return {
        "model_name": "scale",
        "data": {"dataset": "image_folder", "path": str(images), "num_workers": 2,
                 "transforms": {"resize": 32, "mean": [0.5], "std": [0.5]}},
        "train": {"architecture": "digits_cnn", "epochs": epochs, "batch_size": 64},
        "quantize": {"strategy": "single"},
        "evaluate": {"latency_repeats": 20},
        "gate": {"min_speedup": 0.0},
    }


def tree_pss(process: psutil.Process) -> int:
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run_measured(command: list[str], env: dict) -> tuple[int, float, int, str]:
    """(exit code, wall seconds, peak PSS bytes of the command's process tree, its terminal lines)."""
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched, peak, done = psutil.Process(child.pid), 0, threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, tree_pss(watched))
            except psutil.NoSuchProcess:
                return
            time.sleep(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = child.communicate()
    done.set()
    sampler.join()
    if child.returncode != 0:
        sys.stderr.write(err.decode()[-3000:])
    return child.returncode, time.perf_counter() - started, peak, err.decode()


def data_stage_seconds(lines: str) -> float:
    """The data stage's wall time as its terminal line gives it ("data: computed in 1.23 s", "data: reused from
    v1 (…) in 0.40 s"): scanning the folder included, which the stage's manifest (its commit only) is not."""
    found = re.findall(r"^\s*data: (?:computed|reused from .*?) in ([0-9.]+) s$", lines, flags=re.MULTILINE)
    if not found:
        raise SystemExit("no 'data: ... in N s' line in the run's output")
    return float(found[-1])


def version_bytes(folder: Path, seen: set[int]) -> int:
    """Bytes of the files under `folder` whose inode is not in `seen` (then added to it)."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            if stat.st_ino not in seen:
                seen.add(stat.st_ino)
                total += stat.st_size
    return total


def measure_size(count: int, out: Path, epochs: int) -> dict:
    images = write_folder(out / f"images-{count}", count)
    store = Path(tempfile.mkdtemp(prefix=f"scale-{count}-", dir=out))
    config_file = store.parent / f"scale-{count}.yaml"
    config_file.write_text(yaml.safe_dump(config(images, epochs)))
    env = {**os.environ, "QUANTGATE_STORE": str(store)}
    quantgate = str(Path(sys.executable).with_name("quantgate"))
    row: dict = {"images": count}
    seen: set[int] = set()
    for attempt in (1, 2):
        code, wall, peak, lines = run_measured([quantgate, "run", "--config", str(config_file)], env)
        if code not in (0, 1):  # 1: the gate refused (the run itself worked)
            raise SystemExit(f"quantgate run on {count} images exited {code}")
        version = store / "scale" / "versions" / f"v{attempt}"
        record = json.loads((version / "version.json").read_text())
        row[f"wall_s_run{attempt}"] = wall
        row[f"peak_pss_mib_run{attempt}"] = peak / 2**20
        row[f"data_s_run{attempt}"] = data_stage_seconds(lines)
        row[f"store_bytes_added_run{attempt}"] = version_bytes(version, seen)
        row[f"reused_run{attempt}"] = sorted(record.get("reused", {}))
        if attempt == 1:
            train = json.loads((version / "train" / "manifest.json").read_text())["metrics"]
            row["train_images_per_s"] = train["samples_per_second"]
            row["table_bytes"] = (version / "data" / "files.csv.gz").stat().st_size
            row["int8_top1_pct"] = record["metrics"]["int8_top1_pct"]
    row["peak_pss_mib"] = max(row["peak_pss_mib_run1"], row["peak_pss_mib_run2"])
    row["rerun_data_share"] = row["data_s_run2"] / row["data_s_run1"]
    return row


def compare_training(count: int, out: Path, epochs: int) -> dict:
    """The train stage on the same split: streamed with 2 workers vs decoded into memory first."""
    import quantgate  # noqa: F401  (legacy program format before paddle loads)
    from quantgate.config import validate_config
    from quantgate.stages.data import open_data, prepare_data
    from quantgate.stages.data.outputs import DATASET_FILE, SPLITS_FILE
    from quantgate.stages.train.loop import train

    settings = validate_config(config(write_folder(out / f"images-{count}", count), epochs))
    with tempfile.TemporaryDirectory(dir=out) as scratch:
        files, arrays = Path(scratch) / "files", Path(scratch) / "arrays"
        files.mkdir(), arrays.mkdir()
        prepare_data(settings.data, files)
        streamed = open_data(files)
        decoded = {}
        for split in ("train", "calibration", "validation", "test"):  # the old in-memory path: decode everything once
            decoded[f"x_{split}"], decoded[f"y_{split}"] = streamed.array(split)
            decoded[f"index_{split}"] = np.arange(streamed.size(split))
        np.savez(arrays / SPLITS_FILE, **decoded)
        spec = {**streamed.spec, "kind": "arrays"}
        (arrays / DATASET_FILE).write_text(json.dumps(spec))
        speeds = {}
        for name, folder, workers in (("in_memory", arrays, 0), ("streamed_2_workers", files, 2)):
            target = Path(scratch) / f"train-{name}"
            target.mkdir()
            speeds[name] = train(settings.train, folder, target, num_workers=workers).metrics["samples_per_second"]
    return {**speeds, "ratio_streamed_vs_in_memory": speeds["streamed_2_workers"] / speeds["in_memory"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [measure_size(count, args.out.resolve(), args.epochs) for count in args.sizes]
    training = compare_training(min(args.sizes), args.out.resolve(), args.epochs)
    small, large = rows[0], rows[-1]
    result = {
        "machine": {"cpu_flags": cpu_flags(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine()},
        "rows": rows, "training_at_smallest": training,
        "targets": {
            "peak_memory_ratio_largest_vs_smallest": large["peak_pss_mib"] / small["peak_pss_mib"],
            "rerun_data_share_largest": large["rerun_data_share"],
            "streamed_vs_in_memory_training": training["ratio_streamed_vs_in_memory"],
        },
    }
    (args.out / "data_scale.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    header = ("| images | peak PSS MiB | store MiB v1 (table KiB) | added by rerun KiB | data s first | data s rerun "
              "| rerun share | train img/s | INT8 top-1 |")
    lines = [header, "|" + "---:|" * 9]
    for row in rows:
        lines.append(f"| {row['images']:,} | {row['peak_pss_mib']:.0f} | {row['store_bytes_added_run1'] / 2**20:.2f} "
                     f"({row['table_bytes'] / 1024:.0f}) | {row['store_bytes_added_run2'] / 1024:.1f} | "
                     f"{row['data_s_run1']:.2f} | {row['data_s_run2']:.2f} | {row['rerun_data_share']:.1%} | "
                     f"{row['train_images_per_s']:.0f} | {row['int8_top1_pct']:.1f} |")
    lines.append(f"\nTraining at {min(args.sizes):,} images: in memory {training['in_memory']:.0f} img/s, streamed "
                 f"with 2 workers {training['streamed_2_workers']:.0f} img/s "
                 f"({training['ratio_streamed_vs_in_memory']:.1%}). CPU flags: {' '.join(result['machine']['cpu_flags'])}")
    (args.out / "data_scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
