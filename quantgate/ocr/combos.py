"""Which systems are run (every FP32/INT8 mix of the components), their names, and what is measured over them.

A combination says each component's precision, {"detector": "int8", "classifier": "fp32", "recognizer": "int8"};
its name is "det:int8+cls:fp32+rec:int8" (without a classifier "det:int8+rec:int8"). Every mixed system is
judged against the all-FP32 one on the same pages, so "det:int8+cls:fp32+rec:fp32" shows the lines the INT8
detector alone loses, and the all-INT8 one what the whole quantized system loses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product

import numpy as np

from quantgate.ocr.matching import compare_systems, system_scores
from quantgate.ocr.reads import PageRead

DETECTOR, CLASSIFIER, RECOGNIZER = "detector", "classifier", "recognizer"
COMPONENTS = (DETECTOR, CLASSIFIER, RECOGNIZER)  # in the order a page passes through them, and names spell them
# The task each component must have been gated as (the store's data stage records it).
COMPONENT_TASKS = {DETECTOR: "text_detection", CLASSIFIER: "classification", RECOGNIZER: "text_recognition"}
SHORT_NAMES = {DETECTOR: "det", CLASSIFIER: "cls", RECOGNIZER: "rec"}
FP32, INT8 = "fp32", "int8"
PRECISIONS = (FP32, INT8)

# Metric keys of system_metrics, spelled once.
SCORES = "scores"
VS_FP32 = "vs_fp32"
LATENCY_P50, LATENCY_P90 = "latency_ms_p50", "latency_ms_p90"
SPLIT_P50 = {"detection": "detection_ms_p50", "crops": "crops_ms_p50", "recognition": "recognition_ms_p50"}
SQUEEZED, FLIPPED, DROPPED, BOXES, PAGES = "squeezed_crops", "flipped_crops", "dropped_lines", "boxes", "pages"
SPEEDUP = "speedup_int8_vs_fp32"  # all-FP32 median page latency over all-INT8's, as the evaluate stage's key


def components(has_classifier: bool) -> tuple[str, ...]:
    """The components a system has: the classifier is optional."""
    return COMPONENTS if has_classifier else (DETECTOR, RECOGNIZER)


def combo_name(precisions: Mapping[str, str]) -> str:
    """{"detector": "int8", "recognizer": "fp32"} -> "det:int8+rec:fp32" (components in pipeline order)."""
    return "+".join(f"{SHORT_NAMES[part]}:{precisions[part]}" for part in COMPONENTS if part in precisions)


def uniform(has_classifier: bool, precision: str) -> dict[str, str]:
    """Every component in one precision: the all-FP32 or the all-INT8 system."""
    return dict.fromkeys(components(has_classifier), precision)


def all_combos(has_classifier: bool) -> list[dict[str, str]]:
    """All-FP32 first, all-INT8 second, then every mixed system (4 with a classifier's 8 in all, else 2 of 4)."""
    parts = components(has_classifier)
    mixed = [dict(zip(parts, chosen)) for chosen in product(PRECISIONS, repeat=len(parts))
             if len(set(chosen)) > 1]
    return [uniform(has_classifier, FP32), uniform(has_classifier, INT8), *mixed]


def check_combo(precisions: Mapping[str, str], has_classifier: bool) -> list[str]:
    """What is wrong with one combination, each problem in words (empty when it is usable)."""
    wanted = components(has_classifier)
    problems = [f"{part} has no precision (give 'fp32' or 'int8')" for part in wanted if part not in precisions]
    problems += [f"{part!r} is not a component of this system (it has {', '.join(wanted)})"
                 for part in precisions if part not in wanted]
    problems += [f"{part} precision {value!r} is neither 'fp32' nor 'int8'"
                 for part, value in precisions.items() if part in wanted and value not in PRECISIONS]
    return problems


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q))


def _measured(pages: Sequence[PageRead]) -> dict:
    """One system's speed and crop counts over its pages (latencies per page, in ms)."""
    totals = [page.total_ms for page in pages]
    return {
        PAGES: len(pages), LATENCY_P50: _percentile(totals, 50), LATENCY_P90: _percentile(totals, 90),
        SPLIT_P50["detection"]: _percentile([page.detection_ms for page in pages], 50),
        SPLIT_P50["crops"]: _percentile([page.crops_ms for page in pages], 50),
        SPLIT_P50["recognition"]: _percentile([page.recognition_ms for page in pages], 50),
        BOXES: sum(page.boxes for page in pages), SQUEEZED: sum(page.squeezed for page in pages),
        FLIPPED: sum(page.flipped for page in pages), DROPPED: sum(page.dropped for page in pages),
    }


def system_metrics(pages_gt: Sequence[Sequence[dict]], reads: Mapping[str, Sequence[PageRead]]) -> dict:
    """Per system (by combination name): its end-to-end scores (`matching.system_scores`) under "scores", its
    per-page latency (median, 90th percentile) and the medians of its split, its box and crop counts, and, for
    every system but the all-FP32 one, `matching.compare_systems` against all-FP32 under "vs_fp32". Top level:
    "reference" (the all-FP32 system's name) and speedup_int8_vs_fp32 (its median page latency over all-INT8's;
    None when either was not run).

    Raises:
        ValueError: the all-FP32 system is not among `reads`, a system read another number of pages than the
            ground truth has, or the pages have no line to read.
    """
    if not reads:
        raise ValueError("no system was run: pass at least the all-FP32 system's reads")
    names = list(reads)
    has_classifier = any(f"{SHORT_NAMES[CLASSIFIER]}:" in name for name in names)
    reference, int8 = combo_name(uniform(has_classifier, FP32)), combo_name(uniform(has_classifier, INT8))
    if reference not in reads:
        raise ValueError(f"the all-FP32 system {reference!r} is not among the systems read ({', '.join(names)}): "
                         "every system is judged against it, so run it too")
    uneven = [f"{name} read {len(pages)}" for name, pages in reads.items() if len(pages) != len(pages_gt)]
    if uneven:
        raise ValueError(f"{len(pages_gt)} pages of ground truth, but {'; '.join(uneven)}: run every system on "
                         "every page")
    pairs = {name: [page.pairs() for page in pages] for name, pages in reads.items()}
    systems = {}
    for name, pages in reads.items():
        systems[name] = {SCORES: system_scores(pages_gt, pairs[name]), **_measured(pages)}
        if name != reference:
            systems[name][VS_FP32] = compare_systems(pages_gt, pairs[reference], pairs[name])
    speedup = (systems[reference][LATENCY_P50] / systems[int8][LATENCY_P50]
               if int8 in systems and systems[int8][LATENCY_P50] > 0 else None)
    return {"reference": reference, "systems": systems, SPEEDUP: speedup}
