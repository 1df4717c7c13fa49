"""Was the search's choice the right one? Every trial of a finished search, measured on the test lines after the fact.

    python benchmarks/trained_models.py --models rec --strategy search --calibration 556 --validation -1 \
        --test 1000 --test-seed 7 --max-accuracy-drop 1.0 --min-agreement 0.98 --work W --out W/results
    python benchmarks/search_regret.py --work W --out W/results            # ~1 min per trial on 2 cores

The search judges its trials on the validation split only; the gate reads the test split. This script reads the
search's record (`search.json` of the run's quantize stage in `W/rec_store`), rebuilds each trial's INT8 model from
the search's calibration cache (`<store>/.cache/quantize-search`, the PaddleSlim model each trial calibrated,
looked up by its digest under this checkout's quantize code version: run it from the checkout that ran the search)
and lowers it as the trial was lowered. Then, on the test split, in each runtime (onnxruntime and OpenVINO, each INT8
against its own FP32):

  - every trial's line accuracy, drop and agreement: the oracle is the trial that reads the test lines best among
    those that pass the policy there (else the best of all), and the regret is its accuracy minus the kept trial's;
  - the kept model against the all-INT8 model of the same recipe and lowering (no FP32 fall-back), timed in turns in
    one process at batch 16 and 1: the policy's cost in speed.

It never feeds anything back to the search: it is the benchmark's hindsight, not a step of the product.
Writes search_regret.json/.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from int8_onnx import paired_ratio, time_variants
from outputs import write_results

import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.artifacts import ArtifactStore
from quantgate.flows.code_version import code_digest
from quantgate.int8.lower_int8 import Lowering
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import ModelForm, open_runner
from quantgate.samples.reading import open_data
from quantgate.stages.convert.outputs import FP32_FILE
from quantgate.stages.quantize.layer_sensitivity import lowered_model
from quantgate.stages.quantize.outputs import POLICY_MAX_DROP, POLICY_MIN_AGREEMENT, SEARCH_FILE

RUNTIMES = ("onnxruntime", "openvino")
STAGES = ("data", "quantize", "convert")


def stored(store: Path) -> tuple[dict, dict, dict, ArtifactStore]:
    """The store's one version: its stages' verified folders, its record and the quantize stage's config."""
    api = ArtifactStore(store)
    infos = api.versions()
    if len(infos) != 1:
        raise SystemExit(f"expected one version in {store}, found {[(i.model, i.version) for i in infos]}")
    version = api.version(infos[0].model, infos[0].version)
    refs = {stage: api.stage_ref(version, stage) for stage in STAGES}
    folders = {stage: api.verify_stage(ref) for stage, ref in refs.items()}
    return folders, api.version_record(version), api.read_manifest(refs["quantize"]).get("config", {}), api


def lowering_of(trial: dict, stage_config: dict) -> Lowering:
    """How the trial was lowered: the quantize stage's lowering (this machine's weight bits,
    convert.hardswish_grids), and the trial's own where it kept one (its `lowering` record)."""
    options = {"weight_bits": stage_config.get("int8_weight_bits", 8),
               "hardswish_grids": bool(stage_config.get("hardswish_grids", False))}
    options.update(trial.get("lowering") or {})
    return Lowering(**{key: value for key, value in options.items() if key in Lowering.__dataclass_fields__})


def rebuild(trials: list[dict], cache, stage_config: dict, work: Path) -> dict[int, Path]:
    """Each trial's lowered INT8 model, from the cached PaddleSlim calibration its digest names."""
    models = {}
    for trial in trials:
        folder = cache.get(trial["calibration_digest"])
        if folder is None:
            print(f"trial {trial['index']}: its calibration is not in the cache (another code version?); skipped")
            continue
        out = work / f"trial-{trial['index']:03d}.onnx"
        lowered_model(folder, out, lowering_of(trial, stage_config))
        models[trial["index"]] = out
    return models


def test_scores(models: dict[str, Path], data, threads: int) -> dict[str, dict[str, dict]]:
    """Per runtime, per model: line accuracy, drop against that runtime's FP32 and agreement with it."""
    images, _ = data.array("test")
    references, task = data.references("test"), data.task
    scores = {}
    for runtime in RUNTIMES:
        predicted = {}
        for name, path in models.items():
            run = open_runner(runtime, ModelForm(path, name != "fp32", path.name, ""), threads, (16, *images.shape[1:]))
            predicted[name] = task.predict(np.concatenate([run(images[i: i + 16]) for i in range(0, len(images), 16)]))
            del run
        fp32 = task.scores(references, predicted["fp32"])["top1_pct"]
        scores[runtime] = {}
        for name, lines in predicted.items():
            top1 = task.scores(references, lines)["top1_pct"]
            scores[runtime][name] = {"top1_pct": top1, "drop_pts": fp32 - top1,
                                     "agreement": float(np.mean(lines == predicted["fp32"]))}
    return scores


def speed(models: dict[str, Path], data, threads: int, repeats: int, rounds: int) -> list[dict]:
    """The kept model against the all-INT8 one and FP32, in onnxruntime, timed in turns at batch 16 and 1."""
    images, _ = data.array("test", limit=16)
    rows = []
    for batch_size in (16, 1):
        batch = np.ascontiguousarray(images[np.arange(batch_size) % len(images)])
        runners = {name: open_runner("onnxruntime", ModelForm(path, name != "fp32", path.name, ""), threads,
                                     batch.shape) for name, path in models.items()}
        timed = time_variants(runners, batch, repeats, rounds)
        del runners
        medians = {name: float(np.median([v for block in blocks for v in block])) for name, blocks in timed.items()}
        row = {"batch": batch_size, **{f"{name}_ms_p50": value for name, value in medians.items()},
               "kept_speedup": medians["fp32"] / medians["kept"],
               "all_int8_speedup": medians["fp32"] / medians["all_int8"],
               "kept_over_all_int8_speedup_paired": paired_ratio(timed["all_int8"], timed["kept"])}
        rows.append(row)
    return rows


def oracle(trials: list[dict], scores: dict, runtime: str, max_drop: float, min_agreement: float) -> dict:
    """The trial that reads the test lines best among those within the policy there (else the best of all)."""
    measured = [trial for trial in trials if f"trial-{trial['index']}" in scores[runtime]]
    passing = [trial for trial in measured
               if scores[runtime][f"trial-{trial['index']}"]["drop_pts"] <= max_drop
               and scores[runtime][f"trial-{trial['index']}"]["agreement"] >= min_agreement]
    best = max(passing or measured, key=lambda trial: scores[runtime][f"trial-{trial['index']}"]["top1_pct"])
    return {"index": best["index"], "within_policy_on_test": bool(passing),
            "top1_pct": scores[runtime][f"trial-{best['index']}"]["top1_pct"]}


def markdown(result: dict) -> str:
    lines = [f"# The search in hindsight: {result['store']}", "",
             (f"Machine: {result['machine']['model']}; flags {', '.join(result['machine']['flags'])}. "
             f"{result['test_samples']} test lines; kept trial {result['kept']}; search stopped: {result['stopped']}."),
             "", "| trial | phase | recipe | FP32 layers | val drop | val agr | "
             + " | ".join(f"{r} test drop | {r} agr" for r in RUNTIMES) + " |",
             "|---:|---|---|---:|---:|---:|" + "---:|---:|" * len(RUNTIMES)]
    for trial in result["trials"]:
        key = f"trial-{trial['index']}"
        cells = [str(trial["index"]) + (" (kept)" if trial["index"] == result["kept"] else ""), trial["phase"],
                 trial["recipe"]["algo"], str(len(trial["float_layers"])),
                 f"{trial['validation']['accuracy_drop_pts']:.2f}", f"{trial['validation']['agreement']:.4f}"]
        for runtime in RUNTIMES:
            score = result["test"][runtime].get(key)
            cells += [f"{score['drop_pts']:.2f}", f"{score['agreement']:.4f}"] if score else ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| runtime | kept test accuracy | oracle trial | oracle accuracy | regret pts |", "|---|---:|---:|---:|---:|"]
    for runtime, entry in result["regret"].items():
        lines.append(f"| {runtime} | {entry['kept_top1_pct']:.2f} | {entry['oracle']['index']} | "
                     f"{entry['oracle']['top1_pct']:.2f} | {entry['regret_pts']:.2f} |")
    lines += ["", "| batch | FP32 ms | kept ms | all-INT8 ms | kept speed-up | all-INT8 speed-up | kept/all-INT8 (paired) |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["speed"]:
        paired = row["kept_over_all_int8_speedup_paired"]
        lines.append(f"| {row['batch']} | {row['fp32_ms_p50']:.1f} | {row['kept_ms_p50']:.1f} | "
                     f"{row['all_int8_ms_p50']:.1f} | {row['kept_speedup']:.2f}x | {row['all_int8_speedup']:.2f}x | "
                     f"{paired['median']:.3f} [{paired['ci95'][0]:.3f}, {paired['ci95'][1]:.3f}] |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="benchmarks/trained_models.py's --work folder")
    parser.add_argument("--store", default="rec_store", help="the store under --work")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--max-accuracy-drop", type=float, default=None, help="default: the search's policy")
    parser.add_argument("--min-agreement", type=float, default=None, help="default: the search's policy")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)

    started = time.time()
    folders, record, stage_config, api = stored(args.work / args.store)
    search = json.loads((folders["quantize"] / SEARCH_FILE).read_text())
    max_drop = args.max_accuracy_drop if args.max_accuracy_drop is not None else search[POLICY_MAX_DROP]
    min_agreement = args.min_agreement if args.min_agreement is not None else search[POLICY_MIN_AGREEMENT]
    trials, kept = search["trials_detail"], search["kept_trial"]
    cache = api.cache("quantize-search", salt=code_digest("quantize"))
    data = open_data(folders["data"])
    with tempfile.TemporaryDirectory(prefix="quantgate-regret-") as scratch:
        rebuilt = rebuild(trials, cache, stage_config, Path(scratch))
        models = {"fp32": folders["convert"] / FP32_FILE, **{f"trial-{i}": path for i, path in rebuilt.items()}}
        print(f"scoring {len(models)} models on {data.size('test')} test lines in {', '.join(RUNTIMES)}", flush=True)
        scores = test_scores(models, data, args.threads)
        kept_trial = next(trial for trial in trials if trial["index"] == kept)
        all_int8 = min((trial for trial in trials if not trial["float_layers"] and trial["recipe"] == kept_trial["recipe"]
                        and trial["index"] in rebuilt), key=lambda trial: trial["index"], default=kept_trial)
        timing = speed({"fp32": models["fp32"], "kept": rebuilt[kept], "all_int8": rebuilt[all_int8["index"]]}, data,
                       args.threads, args.repeats, args.rounds)
    regret = {}
    for runtime in RUNTIMES:
        best = oracle(trials, scores, runtime, max_drop, min_agreement)
        kept_top1 = scores[runtime][f"trial-{kept}"]["top1_pct"]
        regret[runtime] = {"kept_top1_pct": kept_top1, "oracle": best, "regret_pts": best["top1_pct"] - kept_top1}
    result = {"command": "python benchmarks/search_regret.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "store": str(args.work / args.store), "machine": cpu_record(), "test_samples": data.size("test"),
              "kept": kept, "all_int8_trial": all_int8["index"], "stopped": search.get("stopped"),
              "policy": {"max_accuracy_drop": max_drop, "min_agreement": min_agreement},
              "trials": trials, "test": scores, "regret": regret, "speed": timing,
              "gate_status": record.get("status"), "wall_s": time.time() - started}
    write_results(args.out, "search_regret", result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
