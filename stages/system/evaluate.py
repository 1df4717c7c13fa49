"""The OCR system's evaluation: every FP32/INT8 mix of its components read on the test pages in every runtime,
scored end to end against the pages' labels.

Each component comes as it was gated: its data stage's record (pre-processing, post-processing, dictionary or
classes) and its convert stage's FP32 and INT8 models, so the system reads a crop exactly as its recognizer
was judged. The pages are the system's own data stage (PaddleOCR detection labels); each page file is read
checked against the size and mtime that stage recorded.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.errors import StageError
from quantgate.ocr.combos import (
    CLASSIFIER,
    DETECTOR,
    FP32,
    INT8,
    LATENCY_P50,
    RECOGNIZER,
    SCORES,
    SPEEDUP,
    VS_FP32,
    all_combos,
    combo_name,
    system_metrics,
    uniform,
)
from quantgate.ocr.components import Component, classifier_spec, detector_spec, recognizer_spec
from quantgate.ocr.engine import run_systems
from quantgate.policy.runtimes import CPU, LIBRARY, PRIMARY_RUNTIME, RUNTIMES
from quantgate.runtimes.cpu import cpu_record
from quantgate.runtimes.forms import check_runtimes, library
from quantgate.samples.reading import StoredData, open_data
from quantgate.samples.recorded_image import read_recorded
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.stages.evaluate.outputs import CER_INCREASE, FP32_CER, INT8_CER, primary_runtime
from quantgate.stages.system import outputs as out
from quantgate.tasks.detection import ground_truth

log = logging.getLogger(__name__)
TEST = "test"


class PageChanged(StageError):
    """A page changed since the system's data stage recorded it."""


@dataclass(frozen=True)
class SystemEvaluateResult:
    metrics: dict


def test_pages(data: StoredData, only: int | None = None) -> tuple[list[np.ndarray], list[list[dict]], list[str]]:
    """The test pages (the `only`-th alone, when given) as RGB arrays, their labelled regions and their sha256
    (the pages' identity).

    Raises:
        PageChanged: a page file changed since the data stage recorded it.
    """
    pages, truth, ids = [], [], []
    chosen = [(row, path) for index, (row, path) in enumerate(zip(data.rows[TEST], data.files(TEST)))
              if only is None or index == only]
    for row, path in chosen:
        image = read_recorded(Path(path), row, "RGB")
        if isinstance(image, int):
            raise PageChanged(f"page {path} changed after the data stage recorded it (or no longer decodes); run "
                              "again to record the pages as they are now")
        pages.append(np.asarray(image))
        truth.append([{"points": region["points"], "transcription": region["transcription"]}
                      for region in ground_truth(row.label_name)])
        ids.append(row.sha256)
    return pages, truth, ids


def _headline(measured: dict) -> dict:
    """The all-FP32 vs all-INT8 numbers of one runtime under the keys every task's record uses."""
    systems, reference = measured[out.SYSTEMS], measured["reference"]
    int8_name = next(name for name in systems if name != reference and set(
        part.split(":")[1] for part in name.split("+")) == {INT8})
    fp32, int8 = systems[reference], systems[int8_name]
    compared = int8[VS_FP32]
    return {
        "fp32_top1_pct": fp32[SCORES]["e2e_line_accuracy_pct"], "int8_top1_pct": int8[SCORES]["e2e_line_accuracy_pct"],
        "accuracy_delta_pts": -compared[out.E2E_DROP], out.E2E_DROP: compared[out.E2E_DROP],
        FP32_CER: fp32[SCORES]["cer_matched_pct"], INT8_CER: int8[SCORES]["cer_matched_pct"],
        CER_INCREASE: compared["cer_increase_pts"], "agreement": compared["line_agreement"],
        "latency_ms_p50_fp32": fp32[LATENCY_P50], "latency_ms_p50_int8": int8[LATENCY_P50],
        SPEEDUP: measured[SPEEDUP], "fp32_system": reference, "int8_system": int8_name,
    }


def evaluate_system(components: dict[str, Component | None], data_dir: Path, out_dir: Path,
                    runtimes: tuple[str, ...], threads: int, drop_score: float, cls_thresh: float
                    ) -> SystemEvaluateResult:
    """Read the test pages with every mix of FP32 and INT8 components in every runtime; write reads.json and
    return the metrics: the primary runtime's all-FP32 vs all-INT8 numbers at the top level (as every task's
    record has them), every runtime's under "runtimes" with every system's scores, latency split and lines
    lost or gained against all-FP32.

    Raises:
        RuntimeUnavailable: a runtime is not installed.
        PageChanged: a page changed since the data stage.
        PageTooLarge: a page does not fit the detector's canvas.
    """
    check_runtimes(runtimes)
    data = open_data(Path(data_dir))
    pages, truth, ids = test_pages(data)
    detector, recognizer = detector_spec(components[DETECTOR]), recognizer_spec(components[RECOGNIZER])
    classifier = classifier_spec(components[CLASSIFIER], cls_thresh) if components.get(CLASSIFIER) else None
    combos = all_combos(classifier is not None)
    reads, per_runtime = {}, {}
    for runtime in runtimes:
        found = run_systems(pages, runtime, detector, classifier, recognizer, combos, threads, drop_score)
        measured = system_metrics(truth, found)
        per_runtime[runtime] = {**_headline(measured), out.SYSTEMS: measured[out.SYSTEMS], LIBRARY: library(runtime)}
        reads[runtime] = {name: [[{"points": np.asarray(line.points).tolist(), "text": line.text,
                                   "score": round(float(line.score), 4)} for line in page.lines] for page in pages_read]
                          for name, pages_read in found.items()}
        log.info("evaluate: %s: all-FP32 %.2f %% lines, all-INT8 %.2f %%, %.3gx per page", runtime,
                 per_runtime[runtime]["fp32_top1_pct"], per_runtime[runtime]["int8_top1_pct"],
                 per_runtime[runtime][SPEEDUP] or float("nan"))
    (Path(out_dir) / out.READS_FILE).write_text(json.dumps({out.PAGE_IDS: ids, RUNTIMES: reads}, sort_keys=True,
                                                           ensure_ascii=False) + "\n", encoding="utf-8")
    primary = primary_runtime(runtimes)
    headline = {key: value for key, value in per_runtime[primary].items() if key != out.SYSTEMS}
    used = [part for part in components.values() if part is not None]
    sizes = {f"model_bytes_{precision}": sum((part.convert_dir / name).stat().st_size for part in used)
             for precision, name in (("fp32", FP32_FILE), ("int8", INT8_FILE))}  # the whole system's models
    return SystemEvaluateResult({
        "task": out.TASK_NAME, "accuracy_metric": out.ACCURACY_NAME, "test_samples": len(pages),
        **sizes, "gt_lines": per_runtime[primary][out.SYSTEMS][combo_name(uniform(classifier is not None, FP32))][SCORES]
        ["gt_lines"], **headline, "threads": threads, PRIMARY_RUNTIME: primary, RUNTIMES: per_runtime,
        CPU: cpu_record(), "components": sorted(name for name, part in components.items() if part is not None),
    })
