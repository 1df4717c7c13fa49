"""PaddleOCR's PP-OCRv4 detector and recognizer gated as one OCR system: does the INT8 system read the pages as the
FP32 one does, and how much faster per page?

    python benchmarks/ocr_system.py --out benchmarks/results --pages 260 --also-width 320   # >= 1,000 test lines
    python benchmarks/ocr_system.py --pages 12 --lines 24 --validation 12 --rec-test 12      # a quick look

On rendered document pages (cheques, invoices, bank slips: quantgate/demo/pages.py, a CJK font from Debian),
it runs the real CLI three times into one store, timed: the detector (`task: text_detection`, calibrated on
half the pages, checked on the other half), the recognizer (`task: text_recognition`), then the system
(`task: ocr_system`, the test pages). The recognizer's data (`--recognizer-data`) is by default the system's
own crops: each labelled box of the calibration pages cut by quantgate/ocr/crops.py as the system cuts a box
(`quantgate crops`), read at the system's width: --lines calibrate it, --validation judge its search, --rec-test
more lines of those pages are its own test (the system's test pages calibrate and judge nothing but the system);
`lines` is the older set of rendered single lines. `--also-width 320` gates a second recognizer on the same crops
at W 320 and judges a second system with it, so the narrow variant's FP32 and INT8 are shown beside the wide one.
Both models are quantized by the default search (`quantize.strategy: search`: recipes, recovery, fall-backs)
against the gate's default accuracy policy (`--open-gates` opens it, so a system is judged even when its
recognizer misses it); only the comparisons with an earlier release are open, so a rerun into the same --work
store still releases. It reads the records through the store's API and tabulates, per width, runtime and
FP32/INT8 mix: end-to-end line accuracy (a labelled line counts when a box matches it at IoU >= 0.5 and its
text is read exactly), CER over matched lines, missed and spurious lines, and the median per-page latency at
batch 1 split into detection, crops and recognition; the detector's hmean FP32 vs INT8 per runtime; and the
issue's targets. Writes ocr_system.json and ocr_system.md into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from support.ocr_samples import cjk_font, paddleocr_models, render_financial_lines, write_label_file
from trained_models import cpuinfo_int8_flags, run_quantgate

import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import RELEASE, ArtifactStore
from quantgate.demo.pages import write_demo_dataset
from quantgate.ocr.crop_data import labelled_pages, write_crop_dataset
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import library

RUNTIMES = ("onnxruntime", "openvino")
DETECTOR, RECOGNIZER, SYSTEM = "ppocrv4-det", "ppocrv4-rec", "ppocrv4-system"
PAGE_TRANSFORMS = {"color": "bgr", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
# W 640: a page's longest lines (up to ~560 px at height 48) are read at their own width, not squeezed into 320
# (PaddleOCR widens its batch to the widest crop; a static input has to be wide enough instead).
LINE_TRANSFORMS = {"rec_image_shape": [3, 48, 640], "color": "bgr", "mean": [0.5], "std": [0.5],
                   "line_padding": "zero"}
# The models' gates keep the default accuracy policy, which their search is judged by (a model that misses it is not
# released and the system cannot be built from it: the run says so). A rerun into the same --work store is compared
# with the previous one on few samples: allowed, so it releases.
MODEL_GATE = {"max_release_regression": 100, "max_release_cer_increase_pts": 100, "min_paired_samples": 2}
# --open-gates: the models release whatever their INT8 loses, so the system shows what that costs end to end.
OPEN_POLICY = {"max_accuracy_drop": 100, "max_cer_increase_pts": 100, "max_hmean_drop_pts": 100, "min_agreement": 0,
               "min_speedup": 0}
SYSTEM_GATE = {"min_speedup": 0, "min_agreement": 0, "max_e2e_line_drop_pts": 100, "max_cer_increase_pts": 100,
               "max_release_regression": 100, "min_paired_samples": 2}


def suffix(width: int, primary: int) -> str:
    """The second width's models are named apart: ppocrv4-rec-w320, ppocrv4-system-w320."""
    return "" if width == primary else f"-w{width}"


def detector_config(models, pages: Path, gate: dict, quantize: dict) -> dict:
    return {"task": "text_detection", "model_name": DETECTOR, "trained_model": {"path": str(models.det)},
            "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "calibration.txt"),
                     "test_label_file": str(pages / "test.txt"), "transforms": PAGE_TRANSFORMS},
            # a page at a time, as the system reads them (16 pages of 960x960 need ~13 GB in onnxruntime)
            "evaluate": {"runtimes": list(RUNTIMES), "latency_repeats": 10, "batch_size": 4, "latency_batch_size": 1},
            "gate": gate, "quantize": quantize}


def recognizer_config(models, lines: Path, label_files: tuple[str, str], width: int, share: float, name: str,
                      gate: dict, quantize: dict) -> dict:
    """The recognizer at input 3x48x`width`, on `lines`' label files (calibration + validation, test)."""
    return {"task": "text_recognition", "model_name": name, "trained_model": {"path": str(models.rec)},
            "data": {"dataset": "text_lines", "path": str(lines), "label_file": str(lines / label_files[0]),
                     "test_label_file": str(lines / label_files[1]), "character_dict": str(models.keys),
                     "use_space_char": True, "validation_fraction": share,
                     "too_wide": "squeeze",  # a line wider than W is squeezed into it, as the system squeezes a crop
                     "transforms": {**LINE_TRANSFORMS, "rec_image_shape": [3, 48, width]}},
            "evaluate": {"runtimes": list(RUNTIMES), "latency_repeats": 10, "batch_size": 16}, "gate": gate,
            "quantize": quantize}


def system_config(pages: Path, name: str, recognizer: str) -> dict:
    return {"task": "ocr_system", "model_name": name, "system": {"detector": DETECTOR, "recognizer": recognizer},
            "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "test.txt")},
            "evaluate": {"runtimes": list(RUNTIMES)}, "gate": SYSTEM_GATE}


def crop_lines(pages: Path, out: Path, counts: tuple[int, int]) -> tuple[tuple[str, str], int]:
    """The recognizer's data cut from the calibration pages as the system cuts boxes: the first counts[0] crops
    (calibration and validation) in recognizer.txt, the next counts[1] in recognizer_test.txt; and how many crops
    those pages gave."""
    shutil.rmtree(out, ignore_errors=True)  # a rerun into the same --work cuts the (same) pages afresh
    summary = write_crop_dataset(pages, pages / "calibration.txt", out)
    entries = summary.label_file.read_text(encoding="utf-8").splitlines(keepends=True)
    if len(entries) < sum(counts):
        raise SystemExit(f"the calibration pages hold {len(entries)} labelled lines, fewer than --lines + "
                         f"--validation + --rec-test = {sum(counts)}: raise --pages or lower those")
    names = ("recognizer.txt", "recognizer_test.txt")
    (out / names[0]).write_text("".join(entries[:counts[0]]), encoding="utf-8")
    (out / names[1]).write_text("".join(entries[counts[0]:sum(counts)]), encoding="utf-8")
    return names, len(entries)


def rendered_lines(out: Path, calibration: int, tests: int) -> tuple[str, str]:
    """The older recognizer data: rendered single lines (support/ocr_samples.py)."""
    write_label_file(out / "calibration.txt", render_financial_lines(out, calibration, seed=1))
    write_label_file(out / "test.txt", render_financial_lines(out, tests, seed=2))
    return "calibration.txt", "test.txt"


def released(store: ArtifactStore, model: str) -> dict:
    """The newest version's record and its evaluate stage's metrics (the gates are open: it is the release)."""
    version = store.version(model, store.alias(model, RELEASE) or "v1")
    found = {"version": version.version, "record": store.version_record(version),
             "evaluate": store.read_manifest(store.stage_ref(version, "evaluate"))["metrics"]}
    if not model.startswith(SYSTEM):  # how the default search got its INT8 model
        found["search"] = store.read_manifest(store.stage_ref(version, "quantize"))["metrics"].get("search")
    else:
        found["record"].pop("config", None)
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
                         "recognition_ms_p50": system["recognition_ms_p50"], "squeezed": system.get("squeezed_crops"),
                         "lines_differing_vs_fp32": len((system.get("vs_fp32") or {}).get("differing_lines", []))})
    return rows


def e2e(width: dict, system: str) -> dict[str, float]:
    """{runtime: end-to-end line accuracy} of one FP32/INT8 mix at one width."""
    return {row["runtime"]: round(row["e2e_line_accuracy_pct"], 2) for row in width["systems"]
            if row["system"] == system}


def targets(result: dict) -> list[dict]:
    main, detector = result["widths"][0], result["detector"]["evaluate"]
    by_runtime = main["system"]["evaluate"]["runtimes"]
    fp32_ort = by_runtime["onnxruntime"]["latency_ms_p50_fp32"]
    fastest = min(by_runtime, key=lambda runtime: by_runtime[runtime]["latency_ms_p50_int8"])
    speedup = fp32_ort / by_runtime[fastest]["latency_ms_p50_int8"]
    hmean = {runtime: entry["hmean_drop_pts"] for runtime, entry in detector["runtimes"].items()}
    found = [
        {"target": ">= 1,000 labelled lines on the test pages", "measured": result["test_lines"],
         "met": result["test_lines"] >= 1000}]
    for width in result["widths"]:
        drops = {runtime: round(entry["e2e_line_drop_pts"], 2)
                 for runtime, entry in width["system"]["evaluate"]["runtimes"].items()}
        found.append({"target": f"W {width['width']}: all-INT8 system within 1 pt of all-FP32 end to end (every "
                                "runtime)", "measured": {"drop_pts": drops, "fp32_e2e_pct": width["fp32_e2e_pct"]},
                      "met": all(drop <= 1 for drop in drops.values())})
    for width in result["widths"][1:]:
        fp32_loss = {runtime: round(main["fp32_e2e_pct"][runtime] - value, 2)
                     for runtime, value in width["fp32_e2e_pct"].items()}
        found.append({"target": f"W {width['width']} is a fix only if its FP32 system reads within 1 pt of W "
                                f"{main['width']}'s FP32 (every runtime)", "measured": {"fp32_loss_pts": fp32_loss},
                      "met": all(loss <= 1 for loss in fp32_loss.values())})
    return found + [
        {"target": "INT8 system on its fastest runtime >= 2x faster per page than FP32 in onnxruntime",
         "measured": f"{fastest}: {speedup:.2f}x ({by_runtime[fastest]['latency_ms_p50_int8']:.1f} ms vs "
                     f"{fp32_ort:.1f} ms)", "met": speedup >= 2},
        {"target": "detector hmean drops <= 1 pt (every runtime)", "measured": hmean,
         "met": all(drop <= 1 for drop in hmean.values())},
    ]


def markdown(result: dict) -> str:
    lines = [f"# OCR system benchmark ({result['machine']}; CPU flags {', '.join(result['cpuinfo_int8_flags'])})", "",
             f"`{result['command']}`: {result['workload']}", "",
             ("| W | runtime | system | e2e lines | CER (matched) | missed | spurious | squeezed | page p50 ms | "
             "det / crops / rec ms | lines differing vs FP32 |"), "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for width in result["widths"]:
        for row in width["systems"]:
            lines.append(f"| {width['width']} | {row['runtime']} | `{row['system']}` | "
                         f"{row['e2e_line_accuracy_pct']:.2f} % | {row['cer_matched_pct']:.2f} % | {row['missed']} | "
                         f"{row['spurious']} | {row['squeezed']} | {row['page_ms_p50']:.1f} | "
                         f"{row['detection_ms_p50']:.1f} / {row['crops_ms_p50']:.1f} / {row['recognition_ms_p50']:.1f} "
                         f"| {row['lines_differing_vs_fp32']} |")
    lines += ["", "| detector | FP32 hmean | INT8 hmean | drop | FP32 ms/batch | INT8 ms/batch |", "|---|---:|---:|---:|---:|---:|"]
    for runtime, entry in result["detector"]["evaluate"]["runtimes"].items():
        lines.append(f"| {runtime} | {entry['fp32_hmean_pct']:.2f} % | {entry['int8_hmean_pct']:.2f} % | "
                     f"{entry['hmean_drop_pts']:+.2f} | {entry['latency_ms_p50_fp32']:.1f} | "
                     f"{entry['latency_ms_p50_int8']:.1f} |")
    lines += ["", ("| model | its own test: FP32 / INT8 per runtime | search | steps (trials, s) | kept: validation "
              "drop, agreement |"), "|---|---|---|---|---|"]
    models = [("detector", result["detector"])] + [(f"recognizer W {w['width']}", w["recognizer"])
                                                    for w in result["widths"]]
    for name, model in models:
        search = model.get("search") or {}
        steps = ", ".join(f"{step['phase']} ({step['trials']}, {step['seconds']:.0f})" for step in search.get("steps", []))
        validation = search.get("validation") or {}
        own = "; ".join(f"{runtime} {entry.get('fp32_top1_pct', float('nan')):.2f} / "
                        f"{entry.get('int8_top1_pct', float('nan')):.2f} %"
                        for runtime, entry in model["evaluate"].get("runtimes", {}).items())
        lines.append(f"| {name} | {own} | {'passed' if search.get('passed') else 'nothing passed'} in "
                     f"{search.get('wall_s', 0):.0f} s | {steps} | {validation.get('accuracy_drop_pts', float('nan')):+.2f} "
                     f"pts, {validation.get('agreement', float('nan')):.4f} |")
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'NO'} |" for t in result["targets"]]
    lines += ["", f"Runs (wall, the CLI with Prefect's server): {result['run_seconds']}; total {result['wall_s']} s."]
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--pages", type=int, default=80, help="rendered pages: half calibrate the detector (and "
                        "give the recognizer's crops), half are the system's test pages")
    parser.add_argument("--lines", type=int, default=256, help="lines calibrating the recognizer")
    parser.add_argument("--validation", type=int, default=200, help="lines the recognizer's search is judged on "
                        "(drawn from the same file as the calibration lines)")
    parser.add_argument("--rec-test", type=int, default=128, help="crops: more lines of the calibration pages, "
                        "the recognizer's own test (lines: max(32, --lines / 4) rendered lines)")
    parser.add_argument("--rec-width", type=int, default=640, help="W of the system recognizer's input (crops wider "
                        "are squeezed into it)")
    parser.add_argument("--also-width", type=int, default=None, help="also gate a recognizer at this W (e.g. 320) on "
                        "the same data and judge the system made with it")
    parser.add_argument("--recognizer-data", choices=("crops", "lines"), default="crops",
                        help="crops: the calibration pages' labelled boxes cut as the system cuts them (default); "
                             "lines: rendered single lines")
    parser.add_argument("--strategy", choices=("search", "single"), default="search",
                        help="quantize.strategy of both models (single: one PaddleSlim recipe, for a quick look)")
    parser.add_argument("--open-gates", action="store_true", help="release the models whatever their INT8 loses, so "
                        "the system is judged even when a model misses the default accuracy policy")
    parser.add_argument("--work", type=Path, default=None, help="keep data, configs and the store here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.time()
    models = paddleocr_models()
    gate = {**MODEL_GATE, **(OPEN_POLICY if args.open_gates else {})}
    quantize = {"strategy": args.strategy}
    widths = [args.rec_width] + ([args.also_width] if args.also_width and args.also_width != args.rec_width else [])
    with tempfile.TemporaryDirectory(prefix="quantgate-ocr-system-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        pages, lines, store_root = work / "pages", work / args.recognizer_data, work / "store"
        write_demo_dataset(pages, args.pages, seed=0, test_fraction=0.5)
        test_lines = sum(len(page.boxes) for page in labelled_pages(pages / "test.txt"))
        if args.recognizer_data == "crops":
            label_files, available = crop_lines(pages, lines, (args.lines + args.validation, args.rec_test))
            tests = args.rec_test
        else:
            tests = max(32, args.lines // 4)
            label_files, available = rendered_lines(lines, args.lines + args.validation, tests), None
        share = round(args.validation / (args.lines + args.validation + tests), 6)
        runs = {"detector": detector_config(models, pages, gate, quantize)}
        for width in widths:
            name = RECOGNIZER + suffix(width, args.rec_width)
            runs[name] = recognizer_config(models, lines, label_files, width, share, name, gate, quantize)
            runs[SYSTEM + suffix(width, args.rec_width)] = system_config(pages, SYSTEM + suffix(width, args.rec_width),
                                                                         name)
        seconds = {}
        for name, config in runs.items():
            path = work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config, allow_unicode=True))
            seconds[name], code = run_quantgate(path, store_root)
            if code != 0:  # a model whose gate failed is not released, and the system cannot be made of it
                raise SystemExit(f"{name}: quantgate run exited {code}; its log is in {store_root} (--open-gates "
                                 "judges the system anyway)")
        store = ArtifactStore(store_root)
        result = {"detector": released(store, DETECTOR), "widths": []}
        for width in widths:
            entry = {"width": width, "recognizer": released(store, RECOGNIZER + suffix(width, args.rec_width)),
                     "system": released(store, SYSTEM + suffix(width, args.rec_width))}
            entry["systems"] = system_rows(entry["system"]["evaluate"])
            entry["fp32_e2e_pct"] = e2e(entry, "det:fp32+rec:fp32")
            result["widths"].append(entry)
    data = (f"{args.lines} calibration and {args.validation} validation crops of the calibration pages' labelled "
            f"boxes ({available} in all), {args.rec_test} more its own test" if args.recognizer_data == "crops" else
            f"{args.lines} rendered calibration and {args.validation} validation lines, {tests} test lines")
    result.update({
        "command": "python benchmarks/ocr_system.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "workload": (f"{args.pages} rendered pages ({args.pages // 2} calibrate the detector, the rest are the test "
                     f"pages: {test_lines} labelled lines); the recognizer: {data}; quantize.strategy "
                     f"{args.strategy}{', gates open' if args.open_gates else ''}; font {cjk_font().name}; 2 threads, "
                     f"batch 1 per page, canvas 960x960, recognizer input 3x48x{' and 3x48x'.join(map(str, widths))}"),
        "test_lines": test_lines, "recognizer_data": args.recognizer_data,
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs",
        "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(),
        "libraries": [library(runtime) for runtime in RUNTIMES],
        "run_seconds": {name: round(value, 1) for name, value in seconds.items()},
        "wall_s": round(time.time() - started, 1),
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
