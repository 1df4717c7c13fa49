"""Two workers, one store: two Prefect process workers on one local Prefect server share an s3:// store.

Each worker stands for a machine of its own: its own QUANTGATE_S3_CACHE (the local mirror of the
bucket), one flow run at a time (`--limit 1`), so two runs submitted at once run side by side, one
on each. The bucket is the only thing they share; every check reads it through `quantgate` itself.
The fixtures stop every process they started, even when a test fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import pytest
import test_prefect_server as prefect_setup
from cli_runs import MODEL, quantgate_executable
from prefect.client.orchestration import SyncPrefectClient
from support.s3_fixtures import bucket_name
from test_prefect_server import PREFECT, REPO, TINY, Server, flow_run_state, prefect, run_logs, start, stop, tail

from quantgate.artifacts import LATEST, RELEASE
from quantgate.artifacts.names import version_number
from quantgate.artifacts.paths import committed_stages, version_dir
from quantgate.artifacts.s3.store import CACHE_ENV, default_cache
from quantgate.config import GatePolicy

server = prefect_setup.server  # the module-scoped `prefect server start` on loopback, reused as a fixture

WORKERS = ("worker-a", "worker-b")
# 2 epochs reach >90 % top-1 on digits; one PaddleSlim pass keeps the run to seconds.
STRONG = {**TINY, "quantize": {"strategy": "single"}}
# Weights barely move from their random start (about 10 % top-1). Its own INT8-vs-FP32 rules are waived,
# so it passes while nothing is released, and is far beyond max_release_regression (the default, 1 pt)
# below any release the strong config made.
WEAK = {"train": {"epochs": 1, "learning_rate": 1e-9}, "evaluate": {"latency_repeats": 3},
        "quantize": {"strategy": "single"}, "gate": {"min_speedup": 0, "max_accuracy_drop": 100, "min_agreement": 0}}
MAX_RELEASE_REGRESSION_PTS = GatePolicy().max_release_regression  # neither config sets it
# Stages whose inputs are the run's config and the stages before it: equal inputs, so a rerun takes them.
REUSABLE = ("train", "export", "quantize", "convert")
SUBMITTED = re.compile(r"Worker '([^']+)' submitting flow run '([0-9a-f-]{36})'")
NEW_VERSION = re.compile(r"new version ([\w.-]+)/(v\d+) in (\S+)")


@dataclass
class Pool:
    """The deployments, the shared store and the two workers (each a machine with its own mirror)."""

    server: Server
    store: str
    env: dict[str, str]  # what a user's shell on a third machine has: the server, the bucket, its own mirror
    folder: Path
    workers: dict[str, subprocess.Popen]

    def log(self, worker: str) -> Path:
        return self.folder / f"{worker}.log"

    def cache(self, worker: str) -> Path:
        return self.folder / f"cache-{worker}"

    def mirror_stages(self, worker: str, version: str) -> list[str]:
        """The committed stages of `version` in `worker`'s mirror of the bucket."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(CACHE_ENV, str(self.cache(worker)))
            mirror_root = default_cache(self.store) / "store"  # S3Store mirrors into <cache>/store
        return committed_stages(version_dir(mirror_root, MODEL, version))

    def taken_by(self, flow_run_id: UUID) -> list[str]:
        """The workers whose log says they took `flow_run_id`: both may try, the server lets one submit it."""
        return [name for name in WORKERS if (name, str(flow_run_id)) in SUBMITTED.findall(read(self.log(name)))
                and f"Aborted submission of flow run '{flow_run_id}'" not in read(self.log(name))]

    def quantgate(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([quantgate_executable(), *args, "--store", self.store], env=self.env,
                              capture_output=True, text=True, timeout=180)

    def versions(self) -> dict[str, dict]:
        listed = self.quantgate("versions", "--json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        return {entry["version"]: entry for entry in json.loads(listed.stdout)}

    def audit(self) -> list[dict]:
        logged = self.quantgate("log", "--json")
        assert logged.returncode == 0, logged.stdout + logged.stderr
        return [json.loads(line) for line in logged.stdout.splitlines()]

    def workers_tail(self) -> str:
        return "".join(f"\n--- {name}:\n{tail(self.log(name), 3000)}" for name in WORKERS)


def read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


@dataclass(frozen=True)
class Run:
    flow_run_id: UUID
    returncode: int
    output: str
    version: str
    store: str  # the store the flow said it created its version in
    worker: str


@pytest.fixture(scope="module")
def pool(server, s3_server, tmp_path_factory) -> Iterator[Pool]:
    folder = tmp_path_factory.mktemp("s3-workers")
    bucket = bucket_name("two-workers-one-store")
    s3_server.create_bucket(bucket)
    store = f"s3://{bucket}/store"

    created = prefect(server, "work-pool", "create", "quantgate", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr
    deployed = prefect(server, "deploy", "--all", cwd=REPO)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr

    shell = {**server.env, **s3_server.env(), CACHE_ENV: str(folder / "cache-test")}
    workers: dict[str, subprocess.Popen] = {}
    result = Pool(server, store, shell, folder, workers)
    try:
        for name in WORKERS:
            env = {**server.env, **s3_server.env(), "QUANTGATE_STORE": store, CACHE_ENV: str(result.cache(name))}
            workers[name] = start([PREFECT, "worker", "start", "--pool", "quantgate", "--name", name, "--limit", "1"],
                                  env, result.log(name), folder)
        deadline = time.monotonic() + 180
        for name in WORKERS:
            while f"Worker '{name}' started!" not in read(result.log(name)):
                assert workers[name].poll() is None, f"{name} exited:\n{tail(result.log(name))}"
                assert time.monotonic() < deadline, f"{name} did not start in 180 s:\n{tail(result.log(name))}"
                time.sleep(0.5)
        yield result
    finally:
        for process in workers.values():
            stop(process)


@pytest.fixture(scope="module")
def bucket(pool):
    """The shared store as the test process opens it, with a mirror of its own (a third machine)."""
    from quantgate.artifacts import open_store

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(pool.folder / "cache-test-process"))
        return open_store(pool.store)


def verdicts(store) -> dict[str, dict]:
    """Each version's gate verdict as it stands: its newest decision (a publish that judged it again after
    another worker moved `release` records one), else its record."""
    decided = {}
    for info in store.versions(MODEL):
        ref = store.version(MODEL, info.version)
        decided[info.version] = (store.decisions(ref) or [store.version_record(ref)])[-1]
    return decided


def statuses(store) -> dict[str, str]:
    return {version: verdict["status"] for version, verdict in verdicts(store).items()}


def release_criteria(verdict: dict) -> list[dict]:
    return [c for c in verdict["gate"]["criteria"] if c["name"].startswith("release_regression")]


def deployment_run(pool: Pool, params: dict, *options: str, timeout_s: int = 540) -> Run:
    """`prefect deployment run 'release/on-demand' --params ... --watch`, and what the run and the workers say."""
    result = prefect(pool.server, "deployment", "run", "release/on-demand", "--params", json.dumps(params), *options,
                     "--watch", "--watch-interval", "1", "--watch-timeout", str(timeout_s), timeout=timeout_s + 60)
    output = result.stdout + result.stderr
    found = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout)
    assert found, output
    flow_run_id = UUID(found.group(1))
    messages = run_logs(pool.server, flow_run_id, "new version")
    created = [NEW_VERSION.search(message) for message in messages if NEW_VERSION.search(message)]
    assert len(created) == 1, f"{output}\n{messages}{pool.workers_tail()}"
    model, version, store = created[0].groups()
    assert model == MODEL
    workers = pool.taken_by(flow_run_id)
    assert len(workers) == 1, f"flow run {flow_run_id} taken by {workers}{pool.workers_tail()}"
    return Run(flow_run_id, result.returncode, output, version, store, workers[0])


def check_audit(entries: list[dict], status_of: dict[str, str]) -> dict[str, str]:
    """Replay the audit log; every move must start where the one before it left that alias. Returns the aliases."""
    held: dict[str, str] = {}
    for number, entry in enumerate(entries, start=1):
        assert entry["seq"] == number, entries
        alias, moved_to = entry["alias"], entry["to"]
        assert entry.get("from") == held.get(alias), f"entry {number} moves {alias} from {entry.get('from')}, " \
                                                     f"but it was at {held.get(alias)}: {entries}"
        if alias == RELEASE:
            assert status_of[moved_to] == "passed", f"release moved to {moved_to} ({status_of[moved_to]}): {entries}"
        if alias == LATEST and alias in held:
            assert version_number(moved_to) > version_number(held[alias]), f"latest moved backwards: {entries}"
        held[alias] = moved_to
    times = [entry["at"] for entry in entries]
    assert times == sorted(times), entries
    return held


def release_moves(entries: list[dict]) -> list[tuple[str | None, str]]:
    return [(entry.get("from"), entry["to"]) for entry in entries if entry["alias"] == RELEASE]


@dataclass(frozen=True)
class Pair:
    strong: Run
    weak: Run


@pytest.fixture(scope="module")
def pair(pool) -> Pair:
    """The strong and the weak config submitted at once; the workers' QUANTGATE_STORE names the store."""
    with ThreadPoolExecutor(2) as threads:
        strong, weak = threads.map(lambda config: deployment_run(pool, {"config": config}), (STRONG, WEAK))
    assert strong.returncode == 0, strong.output + pool.workers_tail()
    assert weak.returncode in (0, 1), weak.output + pool.workers_tail()  # 1: judged against the strong release
    return Pair(strong, weak)


def test_two_runs_at_once_on_two_workers_get_distinct_numbers_in_the_shared_store(pool, pair, bucket):
    assert {pair.strong.worker, pair.weak.worker} == set(WORKERS)  # one on each machine
    assert pair.strong.store == pair.weak.store == pool.store  # both found the bucket through the worker's env
    assert {pair.strong.version, pair.weak.version} == {"v1", "v2"}
    assert sorted(pool.versions()) == ["v1", "v2"]
    assert statuses(bucket)[pair.strong.version] == "passed"
    with SyncPrefectClient(pool.server.api_url) as client:
        strong, weak = (client.read_flow_run(run.flow_run_id) for run in (pair.strong, pair.weak))
    assert strong.state.is_completed()
    assert strong.start_time < weak.end_time and weak.start_time < strong.end_time  # they ran side by side
    # Each machine's mirror holds the stages it committed; the bucket is where the other one reads them.
    for run in (pair.strong, pair.weak):
        assert {"data", *REUSABLE, "evaluate", "gate", "report"} <= set(pool.mirror_stages(run.worker, run.version))


def test_release_after_two_runs_at_once_follows_the_local_stores_rules(pool, pair, bucket):
    versions, entries, decided = pool.versions(), pool.audit(), verdicts(bucket)
    strong, weak = pair.strong.version, pair.weak.version
    held = check_audit(entries, statuses(bucket))
    assert held == {RELEASE: strong, LATEST: "v2"}  # latest: the newest number, whichever finished last
    assert RELEASE in versions[strong]["aliases"] and RELEASE not in versions[weak]["aliases"]
    if release_moves(entries)[0] == (None, weak):
        # The weak run published first, with nothing released: it passed and became release; the strong run,
        # judged against it (at its gate or again at publish), is within max_release_regression and moved it.
        assert release_moves(entries) == [(None, weak), (weak, strong)], entries
        assert decided[weak]["status"] == "passed" and pair.weak.returncode == 0, decided[weak]
        judged = release_criteria(decided[strong])
        assert judged and all(c["passed"] and c["measured"] <= MAX_RELEASE_REGRESSION_PTS for c in judged), judged
    else:
        # The strong run released first; the weak one, judged against it (at its gate, or again at publish
        # when the strong run's move came first), is beyond max_release_regression: it failed.
        assert release_moves(entries) == [(None, strong)], entries
        assert decided[weak]["status"] == "failed" and pair.weak.returncode == 1, f"{decided[weak]}\n{pair.weak.output}"
        failed = [c for c in release_criteria(decided[weak]) if not c["passed"]]
        assert failed and all(c["threshold"] == MAX_RELEASE_REGRESSION_PTS and c["measured"] > c["threshold"]
                              for c in failed), decided[weak]["gate"]["criteria"]


@pytest.fixture(scope="module")
def reuse_run(pool, pair) -> Run:
    """The strong config again, on the worker that did not run it (the other one is stopped first).

    The store comes from the flow's `store` parameter this time; the run's own QUANTGATE_STORE names a
    folder, so a parameter that lost to the environment would leave a version there.
    """
    stop(pool.workers[pair.strong.worker])
    decoy = pool.folder / "decoy-store"
    run = deployment_run(pool, {"config": STRONG, "store": pool.store},
                         "--job-variable", f"env={json.dumps({'QUANTGATE_STORE': str(decoy)})}")
    assert not decoy.exists(), f"the run used its QUANTGATE_STORE ({decoy}), not its store parameter"
    assert run.returncode == 0, run.output + pool.workers_tail()
    return run


def test_a_third_run_on_the_other_worker_reuses_what_the_first_committed(pool, pair, reuse_run, bucket):
    assert reuse_run.worker == pair.weak.worker != pair.strong.worker
    assert reuse_run.store == pool.store and reuse_run.version == "v3"
    record = bucket.version_record(bucket.version(MODEL, reuse_run.version))
    # data: both configs read equal data, so either version's is this run's too (the newest is taken).
    assert record["reused"]["data"] in {pair.strong.version, pair.weak.version}, record["reused"]
    assert {stage: record["reused"].get(stage) for stage in REUSABLE} == dict.fromkeys(REUSABLE, pair.strong.version)
    messages = run_logs(pool.server, reuse_run.flow_run_id, "convert: reused from")
    for stage in REUSABLE:  # what the run's Prefect log tells the user
        assert any(f"{stage}: reused from {pair.strong.version} " in m for m in messages), (stage, messages)
    # The files came to this machine from the bucket (the strong run's machine is stopped).
    assert set(REUSABLE) <= set(pool.mirror_stages(reuse_run.worker, reuse_run.version))
    assert bucket.verify_version(MODEL, reuse_run.version)  # the reused stages verify, read back from the bucket


def test_a_later_passing_run_within_max_release_regression_moves_release(pool, pair, reuse_run, bucket):
    entries = pool.audit()
    held = check_audit(entries, statuses(bucket))
    assert held == {RELEASE: reuse_run.version, LATEST: reuse_run.version}
    assert release_moves(entries)[-1] == (pair.strong.version, reuse_run.version)
    judged = release_criteria(verdicts(bucket)[reuse_run.version])
    assert judged and all(c["passed"] and c["measured"] == 0 for c in judged), judged  # the same model, reused


@pytest.fixture(scope="module")
def beyond_run(pool, reuse_run) -> Run:
    """The weak config after the strong one was released, on the worker still running."""
    return deployment_run(pool, {"config": WEAK})


def test_a_later_run_beyond_max_release_regression_keeps_release(pool, reuse_run, beyond_run, bucket):
    state = flow_run_state(pool.server, beyond_run.flow_run_id)
    assert state.is_failed() and f"release gate failed for {MODEL}/{beyond_run.version}" in state.message, \
        f"{state.message}{pool.workers_tail()}"
    assert beyond_run.returncode == 1, beyond_run.output
    entries = pool.audit()
    held = check_audit(entries, statuses(bucket))
    assert held == {RELEASE: reuse_run.version, LATEST: beyond_run.version}
    assert (entries[-1]["alias"], entries[-1]["to"]) == (LATEST, beyond_run.version)  # it moved latest only
    decided = verdicts(bucket)[beyond_run.version]
    failed = [c for c in release_criteria(decided) if not c["passed"]]
    assert decided["status"] == "failed" and failed, decided
    assert all(c["measured"] > MAX_RELEASE_REGRESSION_PTS for c in failed), failed


def test_fsck_finds_the_shared_store_consistent_after_both_workers_wrote_it(pool, beyond_run):
    checked = pool.quantgate("fsck")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for command in ("versions", "log"):
        shown = pool.quantgate(command)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        print(f"\n$ quantgate {command} --store {pool.store}\n{shown.stdout}", end="")
