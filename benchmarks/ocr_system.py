"""PaddleOCR's PP-OCRv4 detector and recognizer gated as one OCR system: does the INT8 system read the pages as the
FP32 one does, and how much faster per page?

    python benchmarks/ocr_system.py --out benchmarks/results              # ~25 min on 2 cores
    python benchmarks/ocr_system.py --pages 24 --lines 64                  # a quick look

On rendered document pages (cheques, invoices, bank slips: quantgate/demo/pages.py, a CJK font from Debian),
it runs the real CLI three times into one store, timed: the detector (`task: text_detection`, calibrated on
half the pages, checked on the other half), the recognizer (`task: text_recognition`, rendered lines), then
the system (`task: ocr_system`, the test pages). Both models are quantized by the default search
(`quantize.strategy: search`: recipes, recovery, fall-backs) against the gate's default accuracy policy, judged
on a validation split of their own (the recognizer: `--validation` extra lines); only the comparisons with an
earlier release are open, so a rerun into the same --work store still releases. It reads the records through the store's API and tabulates,
per runtime and per FP32/INT8 mix: end-to-end line accuracy (a labelled line counts when a box matches it at
IoU >= 0.5 and its text is read exactly), CER over matched lines, missed and spurious lines, and the median
per-page latency at batch 1 split into detection, crops and recognition; the detector's hmean FP32 vs INT8 per
runtime; and the issue's targets. Writes ocr_system.json and ocr_system.md into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from support.ocr_samples import cjk_font, paddleocr_models, render_financial_lines, write_label_file  # noqa: E402
from trained_models import cpuinfo_int8_flags, run_quantgate  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import RELEASE, ArtifactStore  # noqa: E402
from quantgate.demo.pages import write_demo_dataset  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.runtimes.forms import library  # noqa: E402

RUNTIMES = ("onnxruntime", "openvino")
PAGE_TRANSFORMS = {"color": "bgr", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
# W 640: a page's longest lines (up to ~560 px at height 48) are read at their own width, not squeezed into 320
# (PaddleOCR widens its batch to the widest crop; a static input has to be wide enough instead).
LINE_TRANSFORMS = {"rec_image_shape": [3, 48, 640], "color": "bgr", "mean": [0.5], "std": [0.5],
                   "line_padding": "zero"}
# The models' gates keep the default accuracy policy, which their search is judged by (a model that misses it is not
# released and the system cannot be built from it: the run says so). A rerun into the same --work store is compared
# with the previous one on few samples: allowed, so it releases.
MODEL_GATE = {"max_release_regression": 100, "max_release_cer_increase_pts": 100, "min_paired_samples": 2}


def configs(models, pages: Path, lines: Path, rec_width: int, validation_share: float) -> dict[str, dict]:
    """The three runs' configs: the detector, the recognizer, then the system made of both."""
    evaluate = {"runtimes": list(RUNTIMES), "latency_repeats": 10}
    line_transforms = {**LINE_TRANSFORMS, "rec_image_shape": [3, 48, rec_width]}
    return {
        "detector": {"task": "text_detection", "model_name": "ppocrv4-det", "trained_model": {"path": str(models.det)},
                     "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "calibration.txt"),
                              "test_label_file": str(pages / "test.txt"), "transforms": PAGE_TRANSFORMS},
                     # a page at a time, as the system reads them (16 pages of 960x960 need ~13 GB in onnxruntime)
                     "evaluate": {**evaluate, "batch_size": 4, "latency_batch_size": 1}, "gate": MODEL_GATE},
        "recognizer": {"task": "text_recognition", "model_name": "ppocrv4-rec",
                       "trained_model": {"path": str(models.rec)},
                       "data": {"dataset": "text_lines", "path": str(lines),
                                "label_file": str(lines / "calibration.txt"), "test_label_file": str(lines / "test.txt"),
                                "character_dict": str(models.keys), "use_space_char": True,
                                "validation_fraction": validation_share, "transforms": line_transforms},
                       "evaluate": {**evaluate, "batch_size": 16}, "gate": MODEL_GATE},
        "system": {"task": "ocr_system", "model_name": "ppocrv4-system",
                   "system": {"detector": "ppocrv4-det", "recognizer": "ppocrv4-rec"},
                   "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "test.txt")},
                   "evaluate": {"runtimes": list(RUNTIMES)},
                   "gate": {"min_speedup": 0, "min_agreement": 0, "max_e2e_line_drop_pts": 100,
                            "max_cer_increase_pts": 100, "max_release_regression": 100, "min_paired_samples": 2}},
    }


def released(store: ArtifactStore, model: str) -> dict:
    """The newest version's record and its evaluate stage's metrics (the gates are open: it is the release)."""
    version = store.version(model, store.alias(model, RELEASE) or "v1")
    found = {"version": version.version, "record": store.version_record(version),
             "evaluate": store.read_manifest(store.stage_ref(version, "evaluate"))["metrics"]}
    if model != "ppocrv4-system":  # how the default search got its INT8 model
        found["search"] = store.read_manifest(store.stage_ref(version, "quantize"))["metrics"].get("search")
    return found


def system_rows(metrics: dict) -> list[dict]:
    rows = []
    for runtime, entry in metrics["runtimes"].items():
        for name, system in entry["systems"].items():
            scores = system["scores"]
            rows.append({"runtime": runtime, "system": name, "e2e_line_accuracy_pct": scores["e2e_line_accuracy_pct"],
                         "cer_matched_pct": scores["cer_matched_pct"], "missed": scores["missed_lines"],
                         "spurious": scores["spurious_lines"], "page_ms_p50": system["latency_ms_p50"],
                         "detection_ms_p50": system["detection_ms_p50"], "crops_ms_p50": system["crops_ms_p50"],
                         "recognition_ms_p50": system["recognition_ms_p50"],
                         "lines_differing_vs_fp32": len((system.get("vs_fp32") or {}).get("differing_lines", []))})
    return rows


def targets(result: dict) -> list[dict]:
    system, detector = result["system"]["evaluate"], result["detector"]["evaluate"]
    by_runtime = system["runtimes"]
    fp32_ort = by_runtime["onnxruntime"]["latency_ms_p50_fp32"]
    fastest = min(by_runtime, key=lambda runtime: by_runtime[runtime]["latency_ms_p50_int8"])
    speedup = fp32_ort / by_runtime[fastest]["latency_ms_p50_int8"]
    drops = {runtime: entry["e2e_line_drop_pts"] for runtime, entry in by_runtime.items()}
    hmean = {runtime: entry["hmean_drop_pts"] for runtime, entry in detector["runtimes"].items()}
    return [
        {"target": "INT8 system loses <= 1 pt of end-to-end line accuracy (every runtime)", "measured": drops,
         "met": all(drop <= 1 for drop in drops.values())},
        {"target": "INT8 system on its fastest runtime >= 2x faster per page than FP32 in onnxruntime",
         "measured": f"{fastest}: {speedup:.2f}x ({by_runtime[fastest]['latency_ms_p50_int8']:.1f} ms vs "
                     f"{fp32_ort:.1f} ms)", "met": speedup >= 2},
        {"target": "detector hmean drops <= 1 pt (every runtime)", "measured": hmean,
         "met": all(drop <= 1 for drop in hmean.values())},
    ]


def markdown(result: dict) -> str:
    lines = [f"# OCR system benchmark ({result['machine']}; CPU flags {', '.join(result['cpuinfo_int8_flags'])})", "",
             f"`{result['command']}`: {result['workload']}", "",
             "| runtime | system | e2e lines | CER (matched) | missed | spurious | page p50 ms | det / crops / rec ms "
             "| lines differing vs FP32 |", "|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for row in result["systems"]:
        lines.append(f"| {row['runtime']} | `{row['system']}` | {row['e2e_line_accuracy_pct']:.2f} % | "
                     f"{row['cer_matched_pct']:.2f} % | {row['missed']} | {row['spurious']} | {row['page_ms_p50']:.1f} "
                     f"| {row['detection_ms_p50']:.1f} / {row['crops_ms_p50']:.1f} / {row['recognition_ms_p50']:.1f} "
                     f"| {row['lines_differing_vs_fp32']} |")
    lines += ["", "| detector | FP32 hmean | INT8 hmean | drop | FP32 ms/batch | INT8 ms/batch |", "|---|---:|---:|---:|---:|---:|"]
    for runtime, entry in result["detector"]["evaluate"]["runtimes"].items():
        lines.append(f"| {runtime} | {entry['fp32_hmean_pct']:.2f} % | {entry['int8_hmean_pct']:.2f} % | "
                     f"{entry['hmean_drop_pts']:+.2f} | {entry['latency_ms_p50_fp32']:.1f} | "
                     f"{entry['latency_ms_p50_int8']:.1f} |")
    lines += ["", "| model | search | steps (trials, s) | kept: validation drop, agreement |", "|---|---|---|---|"]
    for name in ("detector", "recognizer"):
        search = result[name].get("search") or {}
        steps = ", ".join(f"{step['phase']} ({step['trials']}, {step['seconds']:.0f})" for step in search.get("steps", []))
        validation = search.get("validation") or {}
        lines.append(f"| {name} | {'passed' if search.get('passed') else 'nothing passed'} in "
                     f"{search.get('wall_s', 0):.0f} s | {steps} | {validation.get('accuracy_drop_pts', float('nan')):+.2f} "
                     f"pts, {validation.get('agreement', float('nan')):.4f} |")
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'NO'} |" for t in result["targets"]]
    lines += ["", f"Runs (wall, the CLI with Prefect's server): {result['run_seconds']}; total {result['wall_s']} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--pages", type=int, default=80, help="rendered pages: half calibrate the detector")
    parser.add_argument("--lines", type=int, default=256, help="rendered lines calibrating the recognizer")
    parser.add_argument("--validation", type=int, default=200, help="rendered lines the recognizer's search is "
                        "judged on (drawn from the same file as the calibration lines)")
    parser.add_argument("--rec-width", type=int, default=640, help="W of the recognizer's input (crops wider are "
                        "squeezed into it)")
    parser.add_argument("--work", type=Path, default=None, help="keep data, configs and the store here")
    args = parser.parse_args(argv)
    started = time.time()
    models = paddleocr_models()
    with tempfile.TemporaryDirectory(prefix="quantgate-ocr-system-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        pages, lines, store_root = work / "pages", work / "lines", work / "store"
        write_demo_dataset(pages, args.pages, seed=0, test_fraction=0.5)
        write_label_file(lines / "calibration.txt", render_financial_lines(lines, args.lines + args.validation, seed=1))
        tests = max(32, args.lines // 4)
        write_label_file(lines / "test.txt", render_financial_lines(lines, tests, seed=2))
        share = round(args.validation / (args.lines + args.validation + tests), 6)
        seconds = {}
        for name, config in configs(models, pages, lines, args.rec_width, share).items():
            path = work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config, allow_unicode=True))
            seconds[name], code = run_quantgate(path, store_root)
            if code != 0:  # a model whose gate failed is not released, and the system cannot be made of it
                raise SystemExit(f"{name}: quantgate run exited {code}; its log is in {store_root}")
        store = ArtifactStore(store_root)
        result = {"detector": released(store, "ppocrv4-det"), "recognizer": released(store, "ppocrv4-rec"),
                  "system": released(store, "ppocrv4-system")}
    result["system"]["record"].pop("config", None)
    result.update({
        "command": "python benchmarks/ocr_system.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "workload": (f"{args.pages} rendered pages ({args.pages // 2} calibrate the detector, the rest are the test "
                     f"pages), {args.lines} rendered calibration and {args.validation} validation lines for the recognizer, both "
                     f"models by the default search, font {cjk_font().name}; "
                     f"2 threads, batch 1 per page, canvas 960x960, recognizer input 3x48x{args.rec_width}"),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs",
        "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(),
        "libraries": [library(runtime) for runtime in RUNTIMES],
        "run_seconds": {name: round(value, 1) for name, value in seconds.items()},
        "systems": system_rows(result["system"]["evaluate"]), "wall_s": round(time.time() - started, 1),
    })
    result["targets"] = targets(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ocr_system.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    table = markdown(result)
    (args.out / "ocr_system.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
