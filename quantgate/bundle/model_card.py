"""The model card: what the bundled model is, what it was trained on, how it was quantized and gated.

`build_card` gathers it from the version's records as one dict (written as model_card.json);
`render_markdown` prints the same content for people (model_card.md). Every number is one the
version's stages measured and recorded; nothing is measured again here.
"""

from __future__ import annotations

from quantgate.bundle.layout import TEXT_DETECTION, TEXT_RECOGNITION
from quantgate.bundle.sources import VersionSources
from quantgate.policy.runtimes import RUNTIMES_NOT_APPLICABLE
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.stages.evaluate.outputs import (
    HEADLINE_METRICS,
    LATENCY_P50_FP32_BATCH1,
    LATENCY_P50_INT8_BATCH1,
    ONNXRUNTIME,
    PREDICTIONS_FILE,
)
from quantgate.stages.gate.outputs import CRITERIA, PASSED

SPLITS = ("train", "calibration", "validation", "test")
EVALUATION_COLUMNS = (("fp32_top1_pct", "FP32 top-1 %"), ("int8_top1_pct", "INT8 top-1 %"),
                      ("accuracy_delta_pts", "delta pts"), ("agreement", "agreement"),
                      ("latency_ms_p50_fp32", "FP32 p50 ms"), ("latency_ms_p50_int8", "INT8 p50 ms"),
                      ("speedup_int8_vs_fp32", "speedup x"), ("library", "library"))
# A text recognizer's accuracy keys hold line accuracy; its character error rates are shown beside.
TEXT_EVALUATION_COLUMNS = (("fp32_top1_pct", "FP32 line accuracy %"), ("int8_top1_pct", "INT8 line accuracy %"),
                           ("accuracy_delta_pts", "delta pts"), ("fp32_cer_pct", "FP32 CER %"),
                           ("int8_cer_pct", "INT8 CER %"), ("cer_increase_pts", "CER increase pts"),
                           *EVALUATION_COLUMNS[3:])
# A text detector's accuracy keys hold the hmean of its boxes (IoU above 0.5) over the test pages.
DETECTION_EVALUATION_COLUMNS = (("fp32_hmean_pct", "FP32 hmean %"), ("int8_hmean_pct", "INT8 hmean %"),
                                ("hmean_drop_pts", "hmean drop pts"), ("fp32_precision_pct", "FP32 precision %"),
                                ("int8_precision_pct", "INT8 precision %"), ("fp32_recall_pct", "FP32 recall %"),
                                ("int8_recall_pct", "INT8 recall %"), ("fp32_boxes", "FP32 boxes"),
                                ("int8_boxes", "INT8 boxes"), *EVALUATION_COLUMNS[3:])
COLUMNS_BY_TASK = {TEXT_RECOGNITION: TEXT_EVALUATION_COLUMNS, TEXT_DETECTION: DETECTION_EVALUATION_COLUMNS}
# Shown when the evaluation timed the models at batch 1 too (evaluations before it did not).
BATCH1_COLUMNS = ((LATENCY_P50_FP32_BATCH1, "FP32 p50 ms batch 1"), (LATENCY_P50_INT8_BATCH1, "INT8 p50 ms batch 1"))


def evaluation_by_runtime(evaluated: dict, runtimes: tuple[str, ...]) -> dict[str, dict]:
    """The evaluate stage's record per runtime; an evaluation from before runtimes were listed is onnxruntime's."""
    if isinstance(evaluated.get("runtimes"), dict):
        return {runtime: dict(evaluated["runtimes"].get(runtime, {})) for runtime in runtimes}
    return {ONNXRUNTIME: {**{key: evaluated.get(key) for key in HEADLINE_METRICS},
                          "library": f"onnxruntime {evaluated.get('onnxruntime', '')}".strip(),
                          "fp32_model": FP32_FILE, "int8_model": f"{INT8_FILE} (QOperator)",
                          "predictions_file": PREDICTIONS_FILE}}


def gate_by_runtime(gate: dict, runtimes: tuple[str, ...], primary: str) -> tuple[list[dict], dict]:
    """Each criterion tagged with its runtime ("<runtime>." prefixes, else the primary's), and each runtime's verdict."""
    criteria = []
    for criterion in gate.get(CRITERIA, []):
        name = str(criterion.get("name", ""))
        prefix = name.split(".", 1)[0]
        # A runtime found not applicable (Paddle Inference, a PIR model) is named by its one criterion's prefix.
        named = prefix in runtimes or prefix in (gate.get(RUNTIMES_NOT_APPLICABLE) or {})
        criteria.append({**criterion, "runtime": prefix if named and "." in name else primary})
    verdicts = gate.get("runtimes")
    if not isinstance(verdicts, dict):
        verdicts = {primary: {PASSED: gate.get(PASSED) is True,
                              "failed": [c["name"] for c in criteria if not c.get(PASSED)]}}
    return criteria, verdicts


def build_card(sources: VersionSources, files: dict[str, dict], lineage: dict, runtime_files: dict,
               created_at: str) -> dict:
    """The model card of a bundle holding `files` ({path: {sha256, bytes}}), as JSON-ready data."""
    data, train, quantize = sources.metrics("data"), sources.metrics(sources.trained_stage), sources.metrics("quantize")
    evaluated, record = sources.metrics("evaluate"), sources.record
    primary = evaluated.get("primary_runtime") or sources.runtimes[0]
    criteria, verdicts = gate_by_runtime(sources.gate, sources.runtimes, primary)
    sizes = {runtime: {precision: sum(files[path]["bytes"] for path in paths) for precision, paths in forms.items()}
             for runtime, forms in runtime_files.items()}
    task = sources.task
    vocabulary = ({"characters": sources.characters()} if task == TEXT_RECOGNITION else
                  {"postprocess": sources.preprocessing()["postprocess"]} if task == TEXT_DETECTION else
                  {"classes": sources.classes()})
    return {
        "created_at": created_at,
        "model": {"name": sources.ref.model, "version": sources.ref.version,
                  "architecture": train.get("architecture") or "a Paddle inference model trained elsewhere",
                  "task": task, **vocabulary, "input_shape": data.get("input_shape"),
                  "finalized_at": record.get("finalized_at")},
        "data": {"dataset": data.get("dataset"), "fingerprint_sha256": data.get("fingerprint_sha256"),
                 "samples": {split: data.get(f"samples_{split}") for split in SPLITS},
                 "source": data.get("source"), "preprocessing": sources.preprocessing(),
                 "augmentation": data.get("augmentation")},
        "training": {"trained_here": False, "source": {key: train.get(key) for key in ("origin", "input", "output",
                                                                                   "parameters")}}
        if train.get("trained_here") is False else {"config": record.get("config", {}).get("train"), "amp": train.get("amp"),
                     "scaler": train.get("scaler"), "steps": train.get("steps"),
                     "final_epoch_loss_mean": train.get("final_epoch_loss_mean"),
                     "train_seconds": train.get("train_seconds"), "resumed_from_epoch": train.get("resumed_from_epoch")},
        "quantization": {**{key: quantize.get(key) for key in ("algo", "recipe", "skip_tensors", "calibration_samples",
                                                                "quantize_linear_ops", "search")},
                         # a PIR model's INT8 was calibrated by quantgate on the ONNX graph, not by PaddleSlim
                         **({"calibrated_by": quantize["calibrated_by"]} if quantize.get("calibrated_by") else {}),
                         **_weight_bits(sources)},
        "evaluation": {"primary_runtime": primary, "test_samples": evaluated.get("test_samples"),
                       "accuracy_metric": evaluated.get("accuracy_metric", "top-1"),
                       "latency_batch_size": evaluated.get("latency_batch_size"), "cpu": evaluated.get("cpu"),
                       "config": sources.manifests["evaluate"].get("config"),
                       "runtimes": evaluation_by_runtime(evaluated, sources.runtimes)},
        "gate": {PASSED: True, "verdict": sources.verdict, "decision": sources.decision,
                 "policy": sources.gate.get("policy") or record.get("config", {}).get("gate"),
                 CRITERIA: criteria, "runtimes": verdicts},
        "sizes_bytes": sizes,
        "lineage": lineage,
    }


def number(value: object) -> str:
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}",
            *[f"| {' | '.join(number(cell).replace('|', '/') for cell in row)} |" for row in rows]]


def render_markdown(card: dict) -> str:
    """model_card.md: the card's content for people, section by section."""
    sections = (_summary(card), _data(card["data"]), _training(card["training"]), _quantization(card["quantization"]),
                _evaluation(card["evaluation"], card["model"].get("task")), gate_lines(card["gate"]),
                _sizes(card["sizes_bytes"]), _lineage(card["lineage"]))
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"


def _summary(card: dict) -> list[str]:
    model = card["model"]
    if model.get("task") == TEXT_RECOGNITION:
        characters = model["characters"]
        shown = "".join(characters[:40]) + ("..." if len(characters) > 40 else "")
        primary = card["evaluation"]["runtimes"].get(card["evaluation"]["primary_runtime"], {})
        what = (f"recognizing text lines (CTC, greedy decoding) over a dictionary of {len(characters)} characters "
                f"({shown}); INT8 line accuracy {number(primary.get('int8_top1_pct'))} %, character error rate "
                f"{number(primary.get('int8_cer_pct'))} % on the test split,")
    elif model.get("task") == TEXT_DETECTION:
        params = model["postprocess"]
        primary = card["evaluation"]["runtimes"].get(card["evaluation"]["primary_runtime"], {})
        what = (f"detecting text boxes on pages (DB post-processing: thresh {params.get('thresh')}, box_thresh "
                f"{params.get('box_thresh')}, unclip_ratio {params.get('unclip_ratio')}); INT8 hmean "
                f"{number(primary.get('int8_hmean_pct'))} % (precision {number(primary.get('int8_precision_pct'))} "
                f"%, recall {number(primary.get('int8_recall_pct'))} %) on the test pages,")
    else:
        classes = model["classes"]
        shown = ", ".join(classes[:20]) + (", ..." if len(classes) > 20 else "")
        what = f"classifying {len(classes)} classes ({shown})"
    return [f"# {model['name']} {model['version']}", "",
            (f"{model['architecture']} {what} from float32 NCHW inputs of shape {model['input_shape']}. Gate passed "
             f"({card['gate']['verdict']}). Bundled {card['created_at']}.")]


def _data(data: dict) -> list[str]:
    return ["## Data", "",
            f"- dataset: {data['dataset']}; fingerprint sha256 `{data['fingerprint_sha256']}`",
            "- samples: " + ", ".join(f"{split} {count}" for split, count in data["samples"].items()),
            "- preprocessing: " + "; ".join(data["preprocessing"].get("steps", []))]


def _training(training: dict) -> list[str]:
    if training.get("trained_here") is False:
        origin = training["source"].get("origin") or {}
        files = ", ".join(f"{name} sha256 `{item['sha256']}`" for name, item in origin.get("files", {}).items())
        return ["## Training", "", "- not trained here: imported from "
                f"`{origin.get('path')}` ({training['source'].get('parameters')} parameters); {files}",
                "- AMP: not applicable (no training in quantgate)"]
    amp, config = training.get("amp") or {}, training.get("config") or {}
    requested = amp.get("requested") or {}
    reason = f": {amp['reason']}" if amp.get("reason") else ""
    return ["## Training", "",
            (f"- {config.get('epochs')} epochs, {training.get('steps')} steps, final epoch loss "
             f"{number(training.get('final_epoch_loss_mean'))}, {number(training.get('train_seconds'))} s"),
            f"- AMP requested {requested.get('level')}/{requested.get('dtype')}, effective {amp.get('effective')}{reason}"]


def _weight_bits(sources: VersionSources) -> dict:
    """How many bits the lowered INT8 model's weights keep, and why (convert stage; 8 before it recorded it)."""
    lowered = sources.metrics("convert").get("int8", {}) if "convert" in sources.manifests else {}
    return {"int8_weight_bits": lowered.get("weight_bits", 8),
            "int8_weight_bits_why": lowered.get("weight_bits_why", "as PaddleSlim quantized them")}


def _quantization(quantization: dict) -> list[str]:
    recipe = quantization.get("recipe") or {}
    shown = ", ".join(f"{key} {value}" for key, value in sorted(recipe.items()) if value is not None)
    searched = quantization.get("search") or {}
    steps = [step["phase"] for step in searched.get("steps") or []]
    search = (f"; chosen by the accuracy-aware search ({' -> '.join(steps) or 'recipes'}, "
              f"{'passed' if searched.get('passed') else 'nothing passed'} on validation)" if searched else "")
    bits = quantization.get("int8_weight_bits")
    return ["## Quantization", "",
            f"- {_calibrator(quantization)} post-training INT8: {shown or 'recipe not recorded'}{search}",
            (f"- calibration samples {quantization.get('calibration_samples')}, layers kept in float: "
             f"{', '.join(quantization.get('skip_tensors') or []) or 'none'}"),
            *([f"- weights of the INT8 ONNX model: {bits} bits ({quantization.get('int8_weight_bits_why')})"]
              if bits else [])]


def _calibrator(quantization: dict) -> str:
    """Who calibrated the INT8 model: PaddleSlim on the Paddle program, or (a PIR model) quantgate on the ONNX graph."""
    calibrated_by = quantization.get("calibrated_by")
    return f"calibrated by {calibrated_by}:" if calibrated_by else "PaddleSlim"


def _evaluation(evaluation: dict, task: str | None) -> list[str]:
    columns = COLUMNS_BY_TASK.get(task, EVALUATION_COLUMNS)
    batch1 = any(LATENCY_P50_INT8_BATCH1 in record for record in evaluation["runtimes"].values())
    columns = (*columns, *BATCH1_COLUMNS) if batch1 else columns
    rows = [(runtime, *(record.get(key) for key, _ in columns)) for runtime, record in evaluation["runtimes"].items()]
    sizes = [f"batch {size}" for size in (evaluation.get("latency_batch_size"), 1 if batch1 else None) if size]
    batches = f"; latency: median ms per call at {' and at '.join(sizes)}" if sizes else ""
    return [(f"## Evaluation (test split, {evaluation['test_samples']} samples; primary runtime "
             f"{evaluation['primary_runtime']}{batches})"), "",
            *table(("runtime", *(title for _, title in columns)), rows)]


def gate_lines(gate: dict) -> list[str]:
    rows = [(c["runtime"], c.get("name"), c.get("measured"), f"{c.get('comparison')} {number(c.get('threshold'))}",
             c.get("verdict"), c.get("note") or "") for c in gate[CRITERIA]]
    return [f"## Gate: passed ({gate['verdict']})", "",
            *table(("runtime", "criterion", "measured", "must be", "verdict", "note"), rows)]


def _sizes(sizes: dict) -> list[str]:
    return ["## Sizes (bytes in this bundle)", "",
            *table(("runtime", "FP32", "INT8"), [(runtime, each.get("fp32"), each.get("int8"))
                                                   for runtime, each in sizes.items()])]


def _lineage(lineage: dict) -> list[str]:
    return ["## Lineage", "",
            (f"- store {lineage['store']}, {lineage['model']}/{lineage['version']}, version record sha256 "
             f"`{lineage['version_record_sha256']}`"),
            *[f"- {stage} manifest sha256 `{digest}`" for stage, digest in sorted(lineage["stages"].items())],
            *[f"- {path} <- {source['stage']}/{source['file']}" for path, source in sorted(lineage["sources"].items())]]
