"""`quantgate run` against a Prefect API that is not there: named, with the setting to fix, nothing made."""

import os
import socket
import subprocess
import sys
from pathlib import Path


def closed_port() -> int:
    with socket.socket() as sock:  # bound then released: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_prefect_api_exits_3_naming_the_setting_and_makes_no_version(tmp_path):
    api_url = f"http://127.0.0.1:{closed_port()}/api"
    store = tmp_path / "store"
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(tmp_path / "prefect"), "HOME": str(tmp_path)}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "quantgate"), "run", "--store", str(store), "--epochs", "1"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    assert f"the Prefect API at {api_url} is not reachable" in result.stderr
    assert "PREFECT_API_URL" in result.stderr and "prefect server start" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (store / "digits-cnn").exists()  # no version, no alias
