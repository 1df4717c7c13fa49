"""Report stage: a markdown report and PNG plots of one run, for people rather than scripts.

The numbers are read from what the earlier stages measured and stored; the confusion matrices, the
disagreeing samples and the per-character errors are counted from the evaluate stage's stored predictions,
and only the disagreeing test images are read from the data stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from quantgate.memory.record import markdown_lines as memory_lines
from quantgate.samples.reading import open_data
from quantgate.stages.evaluate.outputs import (
    ACCURACY_METRIC,
    CER_INCREASE,
    FP32_CER,
    INT8_CER,
    INT8_FLOAT_LAYERS,
    ONNXRUNTIME,
    PREDICTIONS_FILE,
    RUNTIMES,
)
from quantgate.stages.gate.outputs import RELEASE_DUEL
from quantgate.stages.report.classification_report import class_names, classification_sections
from quantgate.stages.report.outputs import (
    DISAGREEMENTS,
    FONT,
    REPORT_FILE,
    RUNTIMES_PLOT,
    TRADE_OFF_PLOT,
    TRAINING_PLOT,
)
from quantgate.stages.report.plots import runtimes_plot, training_plot
from quantgate.stages.report.predictions import TEST_SPLIT, read_predictions
from quantgate.stages.report.release_section import release_sections
from quantgate.stages.report.runtimes import (
    cpu_line,
    latency_by_runtime,
    pir_paddle_lines,
    primary_of,
    runtimes_table,
    slower_int8_lines,
)
from quantgate.stages.report.sections import TaskSections
from quantgate.stages.report.text_report import text_sections
from quantgate.stages.report.trade_off import has_trade_off, trade_off_lines, trade_off_plot
from quantgate.tasks import TEXT_DETECTION, TEXT_RECOGNITION, task_of


@dataclass(frozen=True)
class ReportResult:
    report_file: str
    plot_files: tuple[str, ...]
    metrics: dict


def _num(value, spec: str, missing: str = "n/a") -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return missing
    return format(value, spec)


def _size(num_bytes) -> str:
    return "n/a" if not isinstance(num_bytes, (int, float)) else f"{num_bytes / 1024:.1f} KiB"


def _accuracy_name(evaluation: dict) -> str:
    """What the *_top1_pct numbers measure: "top-1 accuracy" or "line accuracy"."""
    name = evaluation.get(ACCURACY_METRIC) or "top-1"
    return name if "accuracy" in name else f"{name} accuracy"


def _cer_row(evaluation: dict) -> list[str]:
    """Text recognition's character error rate next to line accuracy; none for classification."""
    e = evaluation
    if not any(key in e for key in (FP32_CER, INT8_CER, CER_INCREASE)):
        return []
    return [f"| character error rate | {_num(e.get(FP32_CER), '.2f')} % | {_num(e.get(INT8_CER), '.2f')} % "
            f"| {_num(e.get(CER_INCREASE), '+.2f')} pts |"]


def _comparison_table(evaluation: dict, gate_record: dict) -> list[str]:
    e = evaluation
    interval = gate_record.get("delta_interval") or {}
    ci = (f", 95 % CI [{_num(interval.get('low_pts'), '+.2f')}, {_num(interval.get('high_pts'), '+.2f')}] "
          f"(paired bootstrap, {interval.get('resamples')} resamples)") if interval else ", no interval"
    speedup = e.get("speedup_int8_vs_fp32")
    return [
        f"## FP32 vs INT8 ({primary_of(e)}, {e.get('test_samples', 'n/a')} test samples)",
        "",
        "| | FP32 | INT8 | INT8 vs FP32 |",
        "|---|---:|---:|---|",
        f"| {_accuracy_name(e)} | {_num(e.get('fp32_top1_pct'), '.2f')} % | {_num(e.get('int8_top1_pct'), '.2f')} % "
        f"| {_num(e.get('accuracy_delta_pts'), '+.2f')} pts{ci} |",
        *_cer_row(e),
        f"| prediction agreement | | | {_num(e.get('agreement'), '.4f')} of test samples |",
        f"| latency p50 / p90 (ms, batch of {e.get('latency_batch_size', 'n/a')}) "
        f"| {_num(e.get('latency_ms_p50_fp32'), '.3f')} / {_num(e.get('latency_ms_p90_fp32'), '.3f')} "
        f"| {_num(e.get('latency_ms_p50_int8'), '.3f')} / {_num(e.get('latency_ms_p90_int8'), '.3f')} "
        f"| {_num(speedup, '.2f')}x speed-up (p50) |",
        f"| model size | {_size(e.get('model_bytes_fp32'))} | {_size(e.get('model_bytes_int8'))} "
        f"| {_num(e.get('size_ratio_int8_vs_fp32'), '.2f')}x size |",
        *_float_layers_lines(e),
    ]


def _float_layers_lines(evaluation: dict) -> list[str]:
    """What of the INT8 model stays float in onnxruntime, and its share of the INT8 model's kernel time."""
    record = ((evaluation.get(RUNTIMES) or {}).get(ONNXRUNTIME) or {}).get(INT8_FLOAT_LAYERS)
    if not record:
        return []
    layers = ", ".join(f"{op} x{count} ({_num(100 * record['kernel_time_share'].get(op, 0.0), '.1f')} %)"
                       for op, count in record["layers"].items())
    return ["", f"Float layers in the INT8 model (onnxruntime): {layers} of its kernel time at batch "
                f"{record['batch_size']}; {record['note']}."]


def _gate_table(gate_record: dict) -> list[str]:
    lines = ["## Gate", "", "| criterion | measured | must be | verdict | note |", "|---|---:|---|---|---|"]
    for c in gate_record.get("criteria", []):
        verdict = c.get("verdict") or ("pass" if c.get("passed") else "fail")
        shown = "**FAIL**" if verdict == "fail" else verdict.replace("_", " ")
        note = str(c.get("note", "")).replace("|", "/").replace("\n", " ")
        lines.append(f"| {c['name']} | {_num(c.get('measured'), '.4g', 'missing')} {c.get('unit', '')} "
                     f"| {c.get('comparison', '')} {_num(c.get('threshold'), 'g')} | {shown} | {note} |")
    return lines


def _search_lines(search: dict | None) -> list[str]:
    """What the INT8 search tried and kept, and what each FP32 layer costs in speed."""
    if not search:
        return []
    validation = search.get("validation", {})
    first = search.get("first_trial", {})
    lines = [
        "## INT8 recipe search (validation split)",
        "",
        f"- {'passed' if search.get('passed') else '**nothing passed**'}: kept trial {search.get('kept_trial')} of "
        f"{search.get('trials')} in {_num(search.get('wall_s'), '.0f')} s ({search.get('stopped', '')})",
        f"- plain PTQ (trial 1): drop {_num(first.get('validation', {}).get('accuracy_drop_pts'), '+.2f')} pts, "
        f"{'passed' if first.get('passed') else 'missed the policy'}",
        f"- kept: PaddleSlim {search.get('recipe', {})}, drop {_num(validation.get('accuracy_drop_pts'), '+.2f')} pts, "
        f"agreement {_num(validation.get('agreement'), '.4f')}, {_num(search.get('speedup_int8_vs_fp32'), '.2f')}x vs FP32",
        f"- calibrations from cache: {search.get('calibrations_from_cache', 0)}; "
        f"sensitivity ranking from cache: {search.get('ranking_from_cache', False)}; "
        f"fall-back sets estimated without a PaddleSlim run: {search.get('fallback_estimates', 0)}",
    ]
    lines += [f"- {step['phase']}: {step['trials']} trial(s), {_num(step['seconds'], '.0f')} s, closest drop "
              f"{_num(step['accuracy_drop_pts'], '+.2f')} pts, agreement {_num(step['agreement'], '.4f')}"
              + ("" if step.get("gain_pts") is None else f" (gained {_num(step['gain_pts'], '+.2f')} pts, "
                 f"{_num(step['gain_agreement'], '+.4f')} agreement)") + (", passed" if step["passed"] else "")
              for step in search.get("steps") or []]
    if search.get("next_step"):
        lines.append(f"- next step: {search['next_step']}")
    needed = search.get("validation_samples_needed") or {}
    if needed.get("short"):
        lines.append(f"- the validation split's {needed['samples']} samples are too few to show "
                     + ", ".join(f"{name} (needs {needed['needed'][name]})" for name in needed["short"]))
    costs = search.get("float_layer_costs") or []
    if not costs:
        return lines + ["- every quantizable layer runs in INT8"]
    lines += ["", "| layer kept in FP32 | what FP32 costs (% of FP32 latency) | (ms) | with it in INT8 the policy | "
              "measured against |", "|---|---:|---:|---|---|"]
    for cost in costs:
        passed = cost.get("int8_passed_policy")
        against = cost.get("measured_against_trial")
        lines.append(f"| {cost['layer']} | {_num(cost.get('latency_cost_pct_of_fp32'), '+.1f', 'not measured')} "
                     f"| {_num(cost.get('latency_cost_ms'), '+.3f', 'not measured')} "
                     f"| {'n/a' if passed is None else ('held' if passed else 'failed')} "
                     f"| {'no trial had it in INT8' if against is None else f'trial {against}'} |")
    return lines


def _scaler_lines(scaler: dict | None) -> list[str]:
    if not scaler:
        return []
    return [f"- loss scale {_num(scaler.get('initial_scale'), 'g')} -> {_num(scaler.get('final_scale'), 'g')} "
            f"(min {_num(scaler.get('min_scale'), 'g')}), {scaler.get('skipped_steps', 'n/a')} of "
            f"{scaler.get('steps', 'n/a')} steps skipped for inf/NaN gradients"
            f"{'' if scaler.get('scaler_enabled') else ' (GradScaler disabled on this device)'}"]


def _source_lines(source: dict) -> list[str]:
    """A model trained elsewhere: where it came from, what it is; no training, no AMP in this run."""
    origin, spec, output = source.get("origin", {}), source.get("input", {}), source.get("output", {})
    files = ", ".join(f"{name} ({_num(item.get('bytes'), ',')} bytes, sha256 {item.get('sha256', '')[:12]}…)"
                      for name, item in origin.get("files", {}).items())
    top_ops = sorted(source.get("op_histogram", {}).items(), key=lambda item: -item[1])[:8]
    return [
        "## Model: trained elsewhere (not trained here)",
        "",
        f"- imported from `{origin.get('path', 'n/a')}` ({origin.get('format', 'n/a')}): {files}",
        f"- input `{spec.get('name')}` {spec.get('dtype')} {spec.get('shape')}; output `{output.get('name')}` "
        f"{output.get('shape')} ({output.get('kind')}, {output.get('measured_shape')} on one sample)",
        f"- {_num(source.get('parameters'), ',')} parameters in {source.get('parameter_tensors', 'n/a')} tensors; "
        "ops: " + ", ".join(f"{op} {count}" for op, count in top_ops),
        "- training and AMP: not applicable (this run quantized and gated the model as it was given)",
    ]


def _training_lines(train_metrics: dict) -> list[str]:
    if train_metrics.get("trained_here") is False:
        return _source_lines(train_metrics)
    amp = train_metrics.get("amp", {})
    requested = amp.get("requested", {})
    return [
        "## Training",
        "",
        f"- {train_metrics.get('steps', 'n/a')} steps, final-epoch mean loss "
        f"{_num(train_metrics.get('final_epoch_loss_mean'), '.4f')}, "
        f"{_num(train_metrics.get('samples_per_second'), '.0f')} samples/s",
        f"- AMP requested {requested.get('level', 'n/a')}/{requested.get('dtype', 'n/a')}, "
        f"effective: {amp.get('effective', 'n/a')} ({amp.get('reason', 'no record')})",
        *_scaler_lines(train_metrics.get("scaler")),
        "",
        f"![Training loss and loss scale per step]({TRAINING_PLOT})",
    ]


def render_markdown(title: str, evaluation: dict, gate_record: dict, train_metrics: dict,
                    where: dict[str, str], search: dict | None = None, task_lines: list[str] = (),
                    release_lines: list[str] = (), memory: dict | None = None,
                    calibrated_by: str | None = None) -> str:
    """The report as markdown; `task_lines` are the task's sections (see TaskSections), `release_lines` the
    comparison with the release, `memory` the stages' peaks and batches (quantgate.memory.record), `where` maps
    labels to locations (paths, commands) shown at the end; `calibrated_by`, who calibrated the INT8 model when it
    was not PaddleSlim (the quantize manifest's `calibrated_by`)."""
    passed = gate_record.get("passed") is True
    outcome = ("The gate passed: this version may become `release`." if passed else
               "The gate failed: `release` does not move to this version; it is kept for inspection.")
    lines = [f"# {title}: gate {'PASSED' if passed else 'FAILED'}", "", outcome, ""]
    lines += _comparison_table(evaluation, gate_record) + [""]
    lines += [*cpu_line(evaluation), ""] if cpu_line(evaluation) else []
    lines += [f"INT8 calibrated by {calibrated_by}.", ""] if calibrated_by else []
    side_by_side = runtimes_table(evaluation, gate_record)
    lines += [*side_by_side, "", f"![Latency per runtime, FP32 vs INT8]({RUNTIMES_PLOT})", ""] if side_by_side else []
    paddle_fp32 = pir_paddle_lines(evaluation)
    lines += [*paddle_fp32, ""] if paddle_fp32 else []
    slower = slower_int8_lines(evaluation, gate_record)
    lines += [*slower, ""] if slower else []
    lines += _gate_table(gate_record) + [""]
    lines += [*release_lines, ""] if release_lines else []
    lines += [*_search_lines(search), *trade_off_lines(search), ""] if search else []
    lines += [*task_lines, ""] if task_lines else []
    lines += _training_lines(train_metrics) + [""]
    memory_shown = memory_lines(memory)
    lines += [*memory_shown, ""] if memory_shown else []
    lines += ["## Where it lives", ""] + [f"- {label}: `{value}`" for label, value in where.items()]
    return "\n".join(lines) + "\n"


def _detection_sections(*args) -> TaskSections:
    from quantgate.stages.report.detection_report import detection_sections  # OpenCV and shapely: detection only

    return detection_sections(*args)


# What each task adds to the report (classification's sections for records from before tasks).
TASK_SECTIONS = {TEXT_RECOGNITION: text_sections, TEXT_DETECTION: _detection_sections}


def report(title: str, evaluation: dict, gate_record: dict, train_metrics: dict, steps_csv: Path | None,
           where: dict[str, str], out_dir: Path, search: dict | None = None, *, data_dir: Path,
           evaluate_dir: Path, duel_dir: Path | None = None, duel_record: dict | None = None,
           memory: dict | None = None, calibrated_by: str | None = None) -> ReportResult:
    """Write report.md and its pictures into `out_dir`: training.png (`steps_csv` None: a model trained
    elsewhere, whose `train_metrics` are the source stage's); per_class.png and confusion.png for
    classification; disagreements.png when INT8 and FP32 disagree on a test sample; runtimes.png for
    several runtimes; vs_release.png when the release (the duel stage's `duel_record`, its folder `duel_dir`)
    and this version disagree on a paired sample; trade_off.png when `search` (the quantize manifest's search
    summary) has a frontier. `data_dir` and `evaluate_dir` are the data and evaluate
    stages' folders; `memory`, the earlier stages' peaks and batches (quantgate.memory.record.memory_record);
    `calibrated_by`, the quantize manifest's: who calibrated the INT8 model when PaddleSlim did not (a PIR model).

    Raises:
        ValueError: the training steps are empty or unreadable.
        DataError: `data_dir` is not a data stage's folder.
        ReportError: the evaluate stage's predictions do not match the data's test split.
        DataChanged: an image of a disagreeing test sample changed since the data stage recorded it.
    """
    out_dir = Path(out_dir)
    data = open_data(Path(data_dir))
    predictions = read_predictions(Path(evaluate_dir) / PREDICTIONS_FILE, data.references(TEST_SPLIT))
    trained = steps_csv is not None  # None: a model trained elsewhere (train_metrics are the source stage's)
    if trained:
        training_plot(Path(steps_csv), out_dir / TRAINING_PLOT, f"{title}: training loss and loss scale")
    task = task_of(data.spec)
    sections = TASK_SECTIONS.get(task.name, classification_sections)(data, predictions, evaluation, out_dir, title)
    plots = [*([TRAINING_PLOT] if trained else []), *sections.plots]
    latency = latency_by_runtime(evaluation, gate_record)
    if len(latency) > 1:
        runtimes_plot(latency, out_dir / RUNTIMES_PLOT, f"{title}: median latency per runtime")
        plots.append(RUNTIMES_PLOT)
    shown = {ACCURACY_METRIC: task.accuracy_name, **evaluation}  # records from before tasks lack the name
    task_lines = [*sections.lines, "", *sections.font_lines()]
    if data.is_text or data.is_detection:  # predictions are strings (boxes: JSON)
        shown_as = (lambda values: [str(v) for v in values])
    else:
        names = class_names(data, predictions)
        shown_as = (lambda values: [names[int(k)] for k in values])
    release_lines, release_plots, _ = release_sections(
        duel_record, gate_record.get(RELEASE_DUEL), duel_dir, data, primary_of(evaluation), shown_as, out_dir, title)
    plots += release_plots
    if has_trade_off(search):
        trade_off_plot(search, out_dir / TRADE_OFF_PLOT, f"{title}: INT8 search, accuracy against speed")
        plots.append(TRADE_OFF_PLOT)
    (out_dir / REPORT_FILE).write_text(render_markdown(title, shown, gate_record, train_metrics, where, search,
                                                       task_lines, release_lines, memory, calibrated_by))
    metrics = {"report_file": REPORT_FILE, "plots": plots, FONT: sections.font.name if sections.font.draws_strings
               else None, DISAGREEMENTS: sections.disagreements}
    return ReportResult(REPORT_FILE, tuple(plots), metrics)
