"""The OCR system's report: every FP32/INT8 mix per runtime, which model loses which lines, the gate's criteria,
and a page drawn with the all-FP32 and all-INT8 systems' boxes and strings, the differing lines highlighted and
their crops listed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.memory.record import markdown_lines as memory_lines
from quantgate.ocr.combos import LATENCY_P50, SCORES, SPLIT_P50, SQUEEZED, VS_FP32
from quantgate.pictures.fonts import choose_font
from quantgate.pictures.page_picture import draw_page, picture_strings, save_crops
from quantgate.samples.reading import open_data
from quantgate.stages.system import outputs as out
from quantgate.stages.system.evaluate import test_pages

REPORT_FILE = "report.md"
PAGE_PLOT = "page.png"
CROPS_DIR = "crops"
LINES_SHOWN = 20  # differing lines listed per system


@dataclass(frozen=True)
class SystemReportResult:
    metrics: dict


def _num(value, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def _systems_table(runtime: str, entry: dict) -> list[str]:
    lines = [f"### {runtime} ({entry.get('library', runtime)})", "",
             "| system | e2e line accuracy | CER (matched) | missed | spurious | vs all-FP32: lines differing | "
             "page p50 ms | det / crops / rec ms | squeezed |", "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name, system in entry[out.SYSTEMS].items():
        scores, versus = system[SCORES], system.get(VS_FP32)
        split = " / ".join(_num(system[SPLIT_P50[part]], ".1f") for part in ("detection", "crops", "recognition"))
        lines.append(f"| `{name}` | {_num(scores['e2e_line_accuracy_pct'])} % | {_num(scores['cer_matched_pct'])} % "
                     f"| {scores['missed_lines']} | {scores['spurious_lines']} | "
                     f"{len(versus['differing_lines']) if versus else '(reference)'} | {_num(system[LATENCY_P50], '.1f')}"
                     f" | {split} | {system[SQUEEZED]} |")
    return lines


def _losses(entry: dict) -> list[str]:
    """Per mixed system: the ground-truth lines it reads differently from all-FP32 (which model loses which)."""
    lines = ["## Which model loses which lines", ""]
    for name, system in entry[out.SYSTEMS].items():
        versus = system.get(VS_FP32)
        if versus is None:
            continue
        differing = versus["differing_lines"]
        lines.append(f"- `{name}`: {len(differing)} line(s) read differently from all-FP32 "
                     f"({_num(versus[out.E2E_DROP], '+.2f')} pts)")
        for page, line, reference, candidate in differing[:LINES_SHOWN]:
            lines.append(f"  - page {page} line {line}: FP32 {reference!r}, this system {candidate!r}")
    return lines


def _criteria(gate_record: dict) -> list[str]:
    lines = ["## Gate", "", "| criterion | measured | threshold | verdict | note |", "|---|---:|---:|---|---|"]
    for c in gate_record["criteria"]:
        lines.append(f"| {c['name']} | {_num(c['measured'], '.4g')} | {c['comparison']} {c['threshold']:g} | "
                     f"{c['verdict']} | {c['note']} |")
    return lines


def _page_picture(data_dir: Path, reads: dict, metrics: dict, out_dir: Path) -> tuple[list[str], list[str]]:
    """The test page where all-INT8 and all-FP32 differ on the most lines (the first page when none differ)."""
    primary = metrics["primary_runtime"]
    entry = metrics["runtimes"][primary]
    fp32_name, int8_name = entry["fp32_system"], entry["int8_system"]
    differing = entry[out.SYSTEMS][int8_name][VS_FP32]["differing_lines"]
    counts = np.bincount([page for page, *_ in differing], minlength=1)
    page_index = int(counts.argmax()) if len(differing) else 0
    (page,), (truth,), _ = test_pages(open_data(Path(data_dir)), only=page_index)  # the one page drawn
    fp32 = [(line["points"], line["text"]) for line in reads["runtimes"][primary][fp32_name][page_index]]
    int8 = [(line["points"], line["text"]) for line in reads["runtimes"][primary][int8_name][page_index]]
    shown = {line for page_number, line, *_ in differing if page_number == page_index}
    font = choose_font(picture_strings(truth, fp32, int8, shown))
    draw_page(page, truth, fp32, int8, shown, Path(out_dir) / PAGE_PLOT, font.path)
    crops = save_crops(page, [(f"page{page_index}-line{line}", truth[line]["points"])
                              for line in sorted(shown)], Path(out_dir) / CROPS_DIR) if shown else []
    lines = [f"## A test page: {fp32_name} (blue) and {int8_name} (dashed orange), {primary}", "",
             f"![test page {page_index}]({PAGE_PLOT})", ""]
    if shown:
        lines += ["The lines the two read differently (crops as the recognizer got them):", ""]
        lines += [f"- line {line}: truth {truth[line]['transcription']!r}: "
                  f"![crop]({CROPS_DIR}/{path.name})" for line, path in zip(sorted(shown), crops)]
    else:
        lines.append("Both systems read every line of every test page alike.")
    return lines, [PAGE_PLOT, *(f"{CROPS_DIR}/{path.name}" for path in crops)]


def report_system(title: str, metrics: dict, gate_record: dict, reads: dict, data_dir: Path, out_dir: Path,
                  components: dict, memory: dict | None = None) -> SystemReportResult:
    """Write report.md, page.png and the crops of the differing lines into `out_dir`; `memory`: the earlier
    stages' peaks and batches (quantgate.memory.record.memory_record).

    Raises:
        PageChanged: a test page changed since the data stage recorded it.
    """
    passed = gate_record["passed"]
    primary = metrics["primary_runtime"]
    lines = [f"# {title}: gate {'PASSED' if passed else 'FAILED'}", "",
             "The gate passed: this system may become `release`." if passed else
             "The gate failed: `release` does not move to this system; it is kept for inspection.", "",
             "Components (each a passed version of this store, gated on its own): " + ", ".join(
                 f"{part} `{c['model']}/{c['version']}`" for part, c in components.items() if c), "",
             f"{metrics['test_samples']} test pages, {metrics['gt_lines']} labelled lines. A line counts when a box "
             "matches it at IoU >= 0.5 and its text is read exactly.", "", "## Systems", ""]
    for runtime, entry in metrics["runtimes"].items():
        lines += [*_systems_table(runtime, entry), ""]
    lines += [*_criteria(gate_record), "", *_losses(metrics["runtimes"][primary]), ""]
    picture, plots = _page_picture(data_dir, reads, metrics, out_dir)
    lines += picture
    memory_shown = memory_lines(memory)
    lines += ["", *memory_shown] if memory_shown else []
    (Path(out_dir) / REPORT_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return SystemReportResult({"report_file": REPORT_FILE, "plots": plots})
