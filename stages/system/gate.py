"""The OCR system's gate: the all-INT8 system against the all-FP32 one in every runtime (end-to-end line
accuracy, CER over matched lines, agreement of the read lines, per-page speed-up), and the system against its
current release on the same pages.

The release's comparison needs no model run: every system version keeps what its systems read on each page
(reads.json), keyed by the page's sha256, so the pages both read are paired and scored again here. A page
the release never read is left out, and fewer paired pages than gate.min_paired_samples fail the comparison.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from quantgate.config import GatePolicy
from quantgate.ocr.matching import system_scores
from quantgate.policy.criterion import Criterion, criterion, not_applicable, number
from quantgate.policy.runtimes import PRIMARY_RUNTIME, RUNTIMES, criterion_name, runtime_verdicts
from quantgate.stages.evaluate.outputs import CER_INCREASE
from quantgate.stages.gate.outputs import GATE_FILE, PASSED, RELEASE_DUEL, RELEASE_REGRESSION
from quantgate.stages.system import outputs as out

NO_RELEASE = "no release version yet, nothing to compare with"


def _line(page: list[dict]) -> list[tuple[list, str]]:
    return [(line["points"], line["text"]) for line in page]


def paired_release(candidate_reads: dict, candidate_metrics: dict, release_reads: dict, release_metrics: dict,
                   truth: dict[str, list[dict]], runtime: str) -> dict:
    """Both systems' all-INT8 end-to-end line accuracy on the pages both read in `runtime`, and the regression.

    `truth` maps a page's sha256 to its labelled regions (this version's labels judge both).
    """
    mine = candidate_reads[RUNTIMES].get(runtime, {}).get(candidate_metrics[RUNTIMES][runtime]["int8_system"])
    release_entry = (release_metrics.get(RUNTIMES) or {}).get(runtime) or {}
    theirs = release_reads.get(RUNTIMES, {}).get(runtime, {}).get(release_entry.get("int8_system"))
    if mine is None or theirs is None:
        return {"paired_pages": 0, "problem": f"the release has no all-INT8 reads in {runtime}"}
    release_pages = dict(zip(release_reads[out.PAGE_IDS], theirs))
    paired = [(page_id, page) for page_id, page in zip(candidate_reads[out.PAGE_IDS], mine) if page_id in release_pages]
    if not paired:
        return {"paired_pages": 0, "problem": "the release read none of this version's pages"}
    gt = [truth[page_id] for page_id, _ in paired]
    candidate = system_scores(gt, [_line(page) for _, page in paired])["e2e_line_accuracy_pct"]
    release = system_scores(gt, [_line(release_pages[page_id]) for page_id, _ in paired])["e2e_line_accuracy_pct"]
    return {"paired_pages": len(paired), "release_int8_e2e_pct": release, "candidate_int8_e2e_pct": candidate,
            RELEASE_REGRESSION: release - candidate}


def _runtime_criteria(policy: GatePolicy, runtime: str, primary: str, measured: dict, release: dict | None,
                      release_version: str | None) -> list[Criterion]:
    def judged(base: str, value, field: str, comparison: str, unit: str, note: str = "") -> Criterion:
        return criterion(criterion_name(runtime, primary, base), number({"v": value}, "v"),
                         policy.threshold(field, runtime), comparison, unit, note)

    systems = f"{measured.get('int8_system')} vs {measured.get('fp32_system')}"
    speed = (f"median {measured.get('latency_ms_p50_fp32', float('nan')):.4g} ms FP32 / "
             f"{measured.get('latency_ms_p50_int8', float('nan')):.4g} ms INT8 per page")
    found = [
        judged(out.E2E_DROP, measured.get(out.E2E_DROP), "max_e2e_line_drop_pts", "<=", "pts", systems),
        judged(CER_INCREASE, measured.get(CER_INCREASE), "max_cer_increase_pts", "<=", "pts",
               "CER over matched lines"),
        judged("agreement", measured.get("agreement"), "min_agreement", ">=", "fraction",
               "ground-truth lines both systems find and read alike"),
        judged("int8_top1_pct", measured.get("int8_top1_pct"), "min_int8_accuracy", ">=", "%"),
        judged("speedup", measured.get("speedup_int8_vs_fp32"), "min_speedup", ">=", "x", speed),
    ]
    name = criterion_name(runtime, primary, RELEASE_REGRESSION)
    if release is None:
        found.append(not_applicable(name, policy.max_release_regression, "<=", "pts", NO_RELEASE))
    elif not release.get("paired_pages") or release["paired_pages"] < policy.min_paired_samples:
        why = release.get("problem") or (f"{release['paired_pages']} paired pages, fewer than "
                                         f"gate.min_paired_samples={policy.min_paired_samples}")
        found.append(criterion(name, None, policy.max_release_regression, "<=", "pts",
                               f"release {release_version}: {why}"))
    else:
        found.append(criterion(name, release[RELEASE_REGRESSION], policy.max_release_regression, "<=", "pts",
                               f"vs release {release_version} on {release['paired_pages']} paired pages: all-INT8 "
                               f"{release['release_int8_e2e_pct']:.2f} % release, "
                               f"{release['candidate_int8_e2e_pct']:.2f} % this version"))
    return found


def judge_system(policy: GatePolicy, metrics: dict, release: dict[str, dict] | None = None,
                 release_version: str | None = None) -> dict:
    """The gate record of a system version: every criterion of every runtime, the verdicts and the release's
    comparison (`release`: per runtime, `paired_release`'s numbers; None when nothing was released)."""
    runtimes = (metrics[PRIMARY_RUNTIME], *(r for r in metrics[RUNTIMES] if r != metrics[PRIMARY_RUNTIME]))
    primary = runtimes[0]
    criteria = [c for runtime in runtimes for c in _runtime_criteria(
        policy, runtime, primary, metrics[RUNTIMES][runtime], None if release is None else release.get(runtime, {}),
        release_version)]
    as_dicts = [asdict(c) for c in criteria]
    return {PASSED: all(c.passed for c in criteria), "criteria": as_dicts, PRIMARY_RUNTIME: primary,
            RUNTIMES: runtime_verdicts(as_dicts, runtimes, primary),
            RELEASE_DUEL: None if release is None else {"version": release_version, "runtimes": release},
            "policy": policy.model_dump(mode="json")}


def gate_system(policy: GatePolicy, metrics: dict, out_dir: Path, release: dict[str, dict] | None = None,
                release_version: str | None = None) -> dict:
    """`judge_system`, written to out_dir/gate.json."""
    record = judge_system(policy, metrics, release, release_version)
    (Path(out_dir) / GATE_FILE).write_text(json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n")
    return record
