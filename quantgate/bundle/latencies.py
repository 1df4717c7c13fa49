"""Which runtime `quantgate predict` runs when none is named: the fastest one that passed the gate and is installed.

A bundle (format 4) records, in bundle.json's "latencies", each runtime's median latency of its FP32 and INT8
models as the evaluate stage measured them on the run's machine, at batch 1 and at the evaluated batch, and that
machine (the CPU record and the thread count). Each runtime's gate verdict is in "gate": {"runtimes"}. predict
ranks the runtimes that passed by the latency of the precision it runs at batch 1 (at the evaluated batch for an
evaluation made before batch 1 was timed), takes the first one whose library is installed where it runs, and says
which and why. A bundle from before format 4 is ranked by the latencies its model card recorded, at the evaluated
batch. Nothing is timed here: the numbers are the run's, measured on its machine, and the line says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quantgate.bundle import engines
from quantgate.bundle.layout import MODEL_CARD_JSON, OCR_SYSTEM
from quantgate.bundle.verify import VerifiedBundle
from quantgate.stages.evaluate.outputs import BATCH1, latency_key

LATENCIES = "latencies"  # bundle.json's key (format 4)
PER_CALL, PER_PAGE = "call", "page"  # one model on a batch, or one page through an OCR system


def latency_record(by_runtime: dict[str, dict], cpu: dict | None, threads: int | None, batch_size: int | None,
                   per: str = PER_CALL) -> dict:
    """bundle.json's "latencies": per runtime, the p50 latencies (ms) of both precisions at batch 1 and at
    `batch_size`, from the evaluation's entries `by_runtime` (its metric keys), and where they were measured.

    An evaluation from before batch 1 was timed gives only its `batch_size` numbers. An OCR system's evaluation
    ran every model at batch 1: pass batch_size 1 and per PER_PAGE (its latencies are per page).
    """
    runtimes = {}
    for runtime, entry in by_runtime.items():
        points: list[dict] = []
        for size, batch1 in ((BATCH1, True), (batch_size, False)):
            numbers = {latency_key("p50", precision): _ms(entry.get(latency_key("p50", precision, batch1)))
                       for precision in ("fp32", "int8")}
            if size is not None and None not in numbers.values() and size not in [p["batch_size"] for p in points]:
                points.append({"batch_size": int(size), **numbers})
        runtimes[runtime] = points
    return {"measured_on": {"cpu": cpu, "threads": threads}, "per": per, "runtimes": runtimes}


def recorded_latencies(bundle: VerifiedBundle) -> dict:
    """The bundle's "latencies"; for a bundle from before format 4, the same record built from its model card
    (latencies at the evaluated batch only), or one with no numbers when it has no card."""
    recorded = bundle.manifest.get(LATENCIES)
    if isinstance(recorded, dict):
        return recorded
    threads = (bundle.manifest.get("evaluated_with") or {}).get("threads")
    if MODEL_CARD_JSON not in bundle.manifest["files"]:
        return latency_record({}, None, threads, None)
    card = bundle.read_json(MODEL_CARD_JSON)
    evaluation = card.get("evaluation") if isinstance(card, dict) else None
    evaluation = evaluation if isinstance(evaluation, dict) else {}
    by_runtime = {runtime: entry for runtime, entry in (evaluation.get("runtimes") or {}).items()
                  if runtime in bundle.runtimes and isinstance(entry, dict)}
    if bundle.task == OCR_SYSTEM:
        return latency_record(by_runtime, evaluation.get("cpu"), threads, 1, PER_PAGE)
    return latency_record(by_runtime, evaluation.get("cpu"), threads, evaluation.get("latency_batch_size"))


def gate_verdicts(manifest: dict) -> dict[str, dict] | None:
    """{runtime: {"passed", "failed"}} as the bundle's gate record holds them; None where it holds none."""
    verdicts = (manifest.get("gate") or {}).get("runtimes")
    return verdicts if isinstance(verdicts, dict) and verdicts else None


@dataclass(frozen=True)
class Ranking:
    """The bundle's runtimes that passed the gate, fastest first, and what they were ranked by."""

    order: tuple[str, ...]
    precision: str
    batch_size: int | None  # the batch the latencies compared were measured at; None: no latency to rank by
    latency_ms: dict[str, float]  # each ranked runtime's p50 of `precision` at `batch_size`
    failed: dict[str, tuple[str, ...] | None]  # runtimes left out: the criteria they failed (None: no verdict)
    verdicts_recorded: bool  # False: a bundle whose gate record names no runtime (its default runtime alone runs)


def rank_runtimes(manifest: dict, record: dict, precision: str = "int8") -> Ranking:
    """Rank the runtimes of `manifest` that passed the gate by `record`'s p50 latency of `precision` at batch 1,
    else at the largest batch every one of them was timed at; without latencies, the default runtime first, then
    the bundle's order. A runtime without a passing verdict is left out (it fails closed); a bundle whose gate
    record names no runtime offers its default runtime alone, as predict ran before there were verdicts."""
    listed, default = list(manifest["runtimes"]), manifest.get("default_runtime")
    verdicts = gate_verdicts(manifest)
    if verdicts is None:
        return Ranking((default if default in listed else listed[0],), precision, None, {}, {}, False)
    passed = [runtime for runtime in listed if (verdicts.get(runtime) or {}).get("passed") is True]
    failed = {runtime: tuple(verdicts[runtime].get("failed") or ()) if isinstance(verdicts.get(runtime), dict) else None
              for runtime in listed if runtime not in passed}
    points = {runtime: _points(record, runtime, precision) for runtime in passed}
    common = set.intersection(*(set(by_size) for by_size in points.values())) if points else set()
    batch_size = BATCH1 if BATCH1 in common else max(common, default=None)
    latency = {runtime: points[runtime][batch_size] for runtime in passed} if batch_size is not None else {}
    position = {runtime: (runtime != default, index) for index, runtime in enumerate(listed)}
    order = sorted(passed, key=lambda runtime: (latency.get(runtime, 0.0), position[runtime]))
    return Ranking(tuple(order), precision, batch_size, latency, failed, True)


@dataclass(frozen=True)
class RuntimeChoice:
    runtime: str
    reason: str  # the line predict prints: "runtime X: why"


def pick_runtime(bundle: VerifiedBundle, precision: str = "int8") -> RuntimeChoice:
    """The first runtime of `rank_runtimes` whose library is installed here (engines.runtime_installed), and why.

    Raises:
        RuntimeMissing: no runtime of the bundle that passed the gate is installed here (each one's package named).
    """
    record = recorded_latencies(bundle)
    ranking = rank_runtimes(bundle.manifest, record, precision)
    missing = []
    for runtime in ranking.order:
        if engines.runtime_installed(runtime):
            return RuntimeChoice(runtime, explain(ranking, record, runtime, missing))
        missing.append(runtime)
    needs = "; ".join(engines.missing_package(runtime) for runtime in missing)
    raise engines.RuntimeMissing(f"none of the runtimes of bundle {bundle.root} that passed the gate is installed "
                                 f"here: {needs}")


def explain(ranking: Ranking, record: dict, chosen: str, not_installed: list[str]) -> str:
    """One line: the runtime chosen, what it was ranked by (measured where, at which batch) and what was passed over."""
    only = len(ranking.order) == 1
    if not ranking.verdicts_recorded:
        why = "the bundle's default runtime (its gate record names no runtime to rank)"
    elif ranking.batch_size is None:
        why = ("the only runtime of the bundle that passed the gate" if only else
               "the bundle records no latencies to rank the runtimes that passed the gate by, so its default first")
    else:
        measured = ", ".join(f"{runtime} {ranking.latency_ms[runtime]:.3g} ms" for runtime in ranking.order)
        evidence = f"({measured}; {_where(record)})"
        if only:
            why = f"the only runtime of the bundle that passed the gate ({_what(record, ranking)}: {evidence[1:]}"
        else:
            fastest = "" if not not_installed else f" is {ranking.order[0]}"
            why = f"the fastest {_what(record, ranking)} of the runtimes that passed the gate{fastest} {evidence}"
    if not_installed:
        verb = "is" if len(not_installed) == 1 else "are"
        why += f"; {_listed(not_installed)} {verb} not installed here, so {chosen}"
    if ranking.failed:
        why += "; left out: " + ", ".join(f"{runtime} ({_verdict(criteria)})"
                                          for runtime, criteria in ranking.failed.items())
    return f"runtime {chosen}: {why}"


def _what(record: dict, ranking: Ranking) -> str:
    precision = ranking.precision.upper()
    if record.get("per") == PER_PAGE:
        return f"all-{precision} system at batch {ranking.batch_size}"  # every model at that batch, per page
    return f"{precision} at batch {ranking.batch_size}"


def _where(record: dict) -> str:
    """"median per call, measured on <CPU> [flags] with N threads" and, when this machine's CPU differs, that."""
    from quantgate.runtimes.cpu import cpu_record

    measured_on = record.get("measured_on") or {}
    cpu, threads = measured_on.get("cpu"), measured_on.get("threads")
    per = "page" if record.get("per") == PER_PAGE else "call"
    with_threads = f" with {threads} thread{'s' if threads != 1 else ''}" if isinstance(threads, int) else ""
    if not isinstance(cpu, dict):
        return f"median per {per}, measured by the run on a CPU it did not record{with_threads}"
    here = cpu_record()
    differs = (here.get("model"), here.get("flags")) != (cpu.get("model"), cpu.get("flags"))
    note = f"; this machine is another CPU ({_cpu(here)}), where the order may differ" if differs else ""
    return f"median per {per}, measured by the run on {_cpu(cpu)}{with_threads}{note}"


def _cpu(cpu: dict) -> str:
    flags = " ".join(cpu.get("flags") or []) or "no AVX2/AVX-512/VNNI/AMX"
    return f"{cpu.get('model') or 'an unnamed CPU'} [{flags}]"


def _points(record: dict, runtime: str, precision: str) -> dict[int, float]:
    """{batch size: p50 ms of `precision`} that `record` holds for `runtime` (malformed entries left out)."""
    points = (record.get("runtimes") or {}).get(runtime)
    found = {}
    for point in points if isinstance(points, list) else []:
        size = point.get("batch_size") if isinstance(point, dict) else None
        value = _ms(point.get(latency_key("p50", precision))) if isinstance(point, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0 and value is not None:
            found[size] = value
    return found


def _ms(value: object) -> float | None:
    """A latency in ms, or None for anything that is not a positive finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _verdict(failed: tuple[str, ...] | None) -> str:
    if failed is None:
        return "the gate record holds no verdict for it"
    return "did not pass the gate" + (f": {', '.join(failed)}" if failed else "")


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
