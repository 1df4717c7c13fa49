"""The README's Prefect set-up, for real, on loopback: server, work pool, `prefect deploy --all`, worker, runs.

Every process is a real `prefect` command with its own PREFECT_HOME and SQLite database in a temporary
folder; the fixtures stop the worker and the server they started even when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import pytest
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

REPO = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
MODEL = "digits-cnn"
# Small enough to take seconds, large enough that digits clears the accuracy gate (>90 % top-1); the
# speedup floor is off, as in tests/conftest.py: 3 latency repeats on a shared CPU are not a speed claim.
TINY = {"train": {"epochs": 2}, "evaluate": {"latency_repeats": 3}, "gate": {"min_speedup": 0}}
# 100 % INT8 top-1 on 360 real test digits after one epoch at a learning rate of 1e-9 (weights barely
# move from their random start) is out of reach; the policy itself is valid, so the run reaches the gate.
CANNOT_PASS = {"train": {"epochs": 1, "learning_rate": 1e-9}, "evaluate": {"latency_repeats": 3},
               "gate": {"min_int8_accuracy": 100, "min_speedup": 0}}


@dataclass(frozen=True)
class Server:
    api_url: str
    env: dict[str, str]
    folder: Path
    store: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    """A long-running prefect process in its own process group, so stopping it stops its children too."""
    with open(log, "wb") as handle:
        return subprocess.Popen(args, env=env, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGINT (Prefect's graceful shutdown), then SIGKILL the whole group if it is still there."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # also any flow-run child left behind
    except ProcessLookupError:
        pass
    process.wait(grace_s)


def prefect(server: Server, *args: str, timeout: int = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    cwd = cwd or server.folder
    # `{{ $PWD }}`-style templates read PWD, which subprocess does not update with cwd.
    env = {**server.env, "PWD": str(cwd)}
    return subprocess.run([PREFECT, "--no-prompt", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PREFECT_", "QUANTGATE_"))}
    env.update({
        "PREFECT_HOME": str(folder / "home"),
        "PREFECT_API_URL": api_url,
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{folder / 'prefect.db'}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",
        # No nightly runs are generated: the worker must only ever see the runs this test starts.
        "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
        "PREFECT_WORKER_QUERY_SECONDS": "1",
    })
    log = folder / "server.log"
    process = start([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log, folder)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, f"prefect server exited ({process.returncode}):\n{tail(log)}"
            try:
                with urllib.request.urlopen(f"{api_url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:  # refused while it starts (URLError is an OSError)
                pass
            assert time.monotonic() < deadline, f"prefect server not healthy after 180 s:\n{tail(log)}"
            time.sleep(0.5)
        yield Server(api_url, env, folder, folder / "store")
    finally:
        stop(process)


@pytest.fixture(scope="module")
def worker(server) -> Iterator[subprocess.Popen]:
    """The work pool, the deployments from the repository's prefect.yaml, and a worker on that pool."""
    created = prefect(server, "work-pool", "create", "quantgate", "--type", "process")
    assert created.returncode == 0, created.stdout + created.stderr

    prefect_yaml = (REPO / "prefect.yaml").read_bytes()
    had_dot_prefect = (REPO / ".prefect").exists()
    deployed = prefect(server, "deploy", "--all", cwd=REPO)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert (REPO / "prefect.yaml").read_bytes() == prefect_yaml  # the deploy leaves the repository as it was
    assert (REPO / ".prefect").exists() == had_dot_prefect

    log = server.folder / "worker.log"
    env = {**server.env, "QUANTGATE_STORE": str(server.store)}
    process = start([PREFECT, "worker", "start", "--pool", "quantgate"], env, log, server.folder)
    try:
        yield process
    finally:
        stop(process)


def run_deployment(server: Server, config: dict, watch_timeout: int = 300) -> tuple[subprocess.CompletedProcess, UUID]:
    """`prefect deployment run 'release/on-demand' --params ... --watch`; returns its result and the run's id."""
    result = prefect(server, "deployment", "run", "release/on-demand", "--params", json.dumps({"config": config}),
                     "--watch", "--watch-interval", "1", "--watch-timeout", str(watch_timeout),
                     timeout=watch_timeout + 60)
    found = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout)
    assert found, result.stdout + result.stderr
    return result, UUID(found.group(1))


def run_logs(server: Server, flow_run_id: UUID, expected: str, wait_s: float = 30) -> list[str]:
    """The run's stored log lines, once one containing `expected` arrived (logs are shipped in batches)."""
    deadline = time.monotonic() + wait_s
    with SyncPrefectClient(server.api_url) as client:
        while True:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            messages = [log.message for log in logs]
            if any(expected in message for message in messages) or time.monotonic() > deadline:
                return messages
            time.sleep(1)


def flow_run_state(server: Server, flow_run_id: UUID):
    with SyncPrefectClient(server.api_url) as client:
        return client.read_flow_run(flow_run_id).state


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def released(server, worker) -> UUID:
    result, flow_run_id = run_deployment(server, TINY)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nworker:\n{tail(server.folder / 'worker.log')}"
    return flow_run_id


def test_quantgate_run_s_api_check_accepts_a_live_server(server):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from quantgate.flows.prefect_api import check_prefect_api

    with temporary_settings({PREFECT_API_URL: server.api_url}):
        check_prefect_api()  # the unreachable case is tests/integration/test_cli_prefect_api.py


def test_prefect_yaml_declares_nightly_and_on_demand_on_the_process_pool(server, worker):
    with SyncPrefectClient(server.api_url) as client:
        nightly = client.read_deployment_by_name("release/nightly")
        on_demand = client.read_deployment_by_name("release/on-demand")
    assert nightly.work_pool_name == on_demand.work_pool_name == "quantgate"
    [schedule] = nightly.schedules
    assert schedule.schedule.cron == "0 2 * * *" and schedule.schedule.timezone == "UTC"
    assert on_demand.schedules == []
    assert nightly.enforce_parameter_schema and on_demand.enforce_parameter_schema
    # The typed PipelineConfig, so the server, the UI form and the CLI all check the same fields.
    schema = on_demand.parameter_openapi_schema
    assert schema["properties"]["config"]["$ref"] == "#/definitions/PipelineConfig"
    assert {"data", "train", "quantize", "evaluate", "gate"} <= set(schema["definitions"]["PipelineConfig"]["properties"])
    assert schema["definitions"]["TrainConfig"]["properties"]["epochs"]["minimum"] == 1
    assert schema["definitions"]["TrainConfig"]["additionalProperties"] is False


def test_an_on_demand_run_completes_releases_and_logs_progress(server, released):
    assert flow_run_state(server, released).is_completed()
    version_dir = server.store / MODEL / "versions" / "v1"
    record = read_json(version_dir / "version.json")
    assert record["status"] == "passed" and record["gate"]["passed"] is True
    assert record["config"]["train"]["epochs"] == 2  # the run's --params reached the flow; the rest are defaults
    assert record["config"]["train"]["batch_size"] == 64
    assert read_json(version_dir / "gate" / "gate.json")["passed"] is True
    assert read_json(server.store / MODEL / "aliases" / "release.json")["version"] == "v1"

    messages = run_logs(server, released, "train epoch 2/2")
    assert any(re.search(r"train epoch 2/2: loss [0-9.]+, [0-9]+ samples/s", m) for m in messages), messages
    assert any("quantize calibration pass 1, batch" in m for m in messages), messages


def test_a_policy_that_cannot_pass_fails_the_run_and_keeps_release(server, released):
    result, flow_run_id = run_deployment(server, CANNOT_PASS)
    assert result.returncode == 1, result.stdout + result.stderr
    state = flow_run_state(server, flow_run_id)
    assert state.is_failed()
    assert "release gate failed for digits-cnn/v2" in state.message and "must be >= 100" in state.message

    version_dir = server.store / MODEL / "versions" / "v2"
    gate = read_json(version_dir / "gate" / "gate.json")
    failed = {criterion["name"]: criterion for criterion in gate["criteria"] if not criterion["passed"]}
    assert gate["passed"] is False and "int8_top1_pct" in failed  # other criteria may fail too; this one must
    assert failed["int8_top1_pct"]["threshold"] == 100 and failed["int8_top1_pct"]["measured"] < 100
    assert read_json(version_dir / "version.json")["status"] == "failed"
    assert read_json(server.store / MODEL / "aliases" / "release.json")["version"] == "v1"
    assert read_json(server.store / MODEL / "aliases" / "latest.json")["version"] == "v2"


@pytest.mark.parametrize("config, field, reason", [
    ({"train": {"epochs": 0}}, "config.train.epochs", "0 is less than the minimum of 1"),
    ({"train": {"epoch": 2}}, "config.train", "'epoch' was unexpected"),
])
def test_an_invalid_parameter_is_refused_before_a_run_exists(server, released, config, field, reason):
    versions_before = sorted(p.name for p in (server.store / MODEL / "versions").iterdir())
    with SyncPrefectClient(server.api_url) as client:
        runs_before = len(client.read_flow_runs())
    result = prefect(server, "deployment", "run", "release/on-demand", "--param", f"config={json.dumps(config)}")
    output = " ".join((result.stdout + result.stderr).split())  # the CLI wraps long lines
    assert result.returncode != 0
    assert f"Validation failed for field '{field}'" in output and reason in output
    with SyncPrefectClient(server.api_url) as client:
        assert len(client.read_flow_runs()) == runs_before  # refused by the server: no run, no training
    assert sorted(p.name for p in (server.store / MODEL / "versions").iterdir()) == versions_before


def test_a_run_that_skips_the_servers_check_fails_in_the_flow_naming_the_field(server, released):
    # The REST API lets a caller switch schema enforcement off for one run; the flow validates again.
    versions_before = sorted(p.name for p in (server.store / MODEL / "versions").iterdir())
    body = {"parameters": {"config": {"gate": {"min_agreement": 1.5}}}, "enforce_parameter_schema": False}
    with SyncPrefectClient(server.api_url) as client:
        deployment = client.read_deployment_by_name("release/on-demand")
        # through the client's own transport: it retries the 503 a busy server answers with
        answer = client.request("POST", "/deployments/{id}/create_flow_run", path_params={"id": deployment.id},
                                json=body)
        answer.raise_for_status()
        flow_run_id = UUID(answer.json()["id"])
    deadline = time.monotonic() + 300
    while not (state := flow_run_state(server, flow_run_id)).is_final():
        assert time.monotonic() < deadline, f"run still {state.name}:\n{tail(server.folder / 'worker.log')}"
        time.sleep(1)
    assert state.is_failed(), state
    assert "gate.min_agreement" in state.message and "less than or equal to 1" in state.message, state.message
    assert sorted(p.name for p in (server.store / MODEL / "versions").iterdir()) == versions_before


def test_a_deployment_run_cannot_import_an_untrusted_factory(server, released, tmp_path):
    # Whoever may create flow runs names a module that is on the worker's path (here through the run's
    # PYTHONPATH); the worker trusts no user factories (QUANTGATE_TRUSTED_FACTORIES unset, the default).
    # Importing the module would write the marker: its absence proves nothing was imported.
    marker = tmp_path / "imported"
    (tmp_path / "qg_untrusted_net.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                                 "def net(num_classes):\n    raise RuntimeError('the factory ran')\n")
    python_path = os.pathsep.join(filter(None, [str(tmp_path), server.env.get("PYTHONPATH")]))
    config = {**TINY, "train": {**TINY["train"], "architecture": "qg_untrusted_net:net"}}
    versions_before = sorted(p.name for p in (server.store / MODEL / "versions").iterdir())
    # The second run also tries to trust the factory itself, through its own job variables.
    for env in ({"PYTHONPATH": python_path},
                {"PYTHONPATH": python_path, "QUANTGATE_TRUSTED_FACTORIES": "qg_untrusted_net:*"}):
        result = prefect(server, "deployment", "run", "release/on-demand", "--params", json.dumps({"config": config}),
                         "--job-variable", f"env={json.dumps(env)}", "--watch", "--watch-interval", "1",
                         "--watch-timeout", "300", timeout=360)
        found = re.search(r"UUID: ([0-9a-f-]{36})", result.stdout)
        assert found, result.stdout + result.stderr
        state = flow_run_state(server, UUID(found.group(1)))
        assert not marker.exists(), f"the untrusted module was imported; the run ended {state.name}: {state.message}"
        assert state.is_failed(), f"{state}\nworker:\n{tail(server.folder / 'worker.log')}"
        assert "UntrustedFactory" in state.message and "QUANTGATE_TRUSTED_FACTORIES" in state.message, state.message
        assert "'qg_untrusted_net:net'" in state.message, state.message
    assert sorted(p.name for p in (server.store / MODEL / "versions").iterdir()) == versions_before
