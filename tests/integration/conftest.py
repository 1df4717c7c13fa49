"""Fixtures for the CLI tests that run many short pipelines: one Prefect server and one released store.

The crash, reuse, concurrency and bad-input tests each start `quantgate run` several times.
They share one real Prefect server on loopback (as a deployment would) instead of each run
starting its own temporary server, and copy one released store instead of retraining.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runs import TINY_RUN, Runner, copy_store


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def quantgate_cli(tmp_path_factory) -> Runner:
    """A Runner whose runs report to one `prefect server start` on loopback, stopped at the end."""
    home = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    env = {**os.environ, "HOME": str(home), "PREFECT_HOME": str(home / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_UI_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    env.pop("QUANTGATE_STORE", None)
    prefect = Path(sys.executable).parent / "prefect"
    server = subprocess.Popen([str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                               "--no-services"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              start_new_session=True)
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{api}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prefect server did not start on port {port}") from None
                time.sleep(0.5)
        yield Runner({**env, "PREFECT_API_URL": api})
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


@dataclass(frozen=True)
class ReleasedStore:
    root: Path
    run_output: str


@pytest.fixture(scope="session")
def released_store(quantgate_cli, tmp_path_factory) -> ReleasedStore:
    """A store holding one passing run (v1, `release` and `latest`), made once; copy it before changing it."""
    root = tmp_path_factory.mktemp("released") / "store"
    result = quantgate_cli.run("run", "--store", str(root), *TINY_RUN)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return ReleasedStore(root, result.stdout)


@pytest.fixture
def store_copy(released_store, tmp_path) -> Path:
    """A private copy of the released store, for a test that changes it."""
    return copy_store(released_store.root, tmp_path / "store")


