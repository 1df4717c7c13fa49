"""`visualdl --logdir <version>/train/vdl` serves the training scalars the train stage wrote."""

import csv
import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch_scalars(port: int, logdir: Path, tag: str, deadline: float) -> list:
    query = urllib.parse.urlencode({"run": str(logdir), "tag": tag})
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/app/api/scalar/list?{query}", timeout=5) as reply:
                return json.loads(reply.read())["data"]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_visualdl_server_shows_loss_and_samples_per_second(stage_dirs, tmp_path):
    logdir = stage_dirs.train / "vdl"
    port = free_port()
    with open(tmp_path / "visualdl.log", "w") as server_log:
        server = subprocess.Popen([str(Path(sys.executable).parent / "visualdl"), "--logdir", str(logdir),
                                   "--host", "127.0.0.1", "--port", str(port)], stdout=server_log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 90
            loss = fetch_scalars(port, logdir, "train/loss", deadline)
            throughput = fetch_scalars(port, logdir, "train/samples_per_second", deadline)
        finally:
            server.terminate()
            server.wait(timeout=30)
    with open(stage_dirs.train / "steps.csv") as handle:
        rows = list(csv.DictReader(handle))
    # Each point is [wall time ms, step, value].
    assert [point[1] for point in loss] == [int(row["step"]) for row in rows]
    assert [point[2] for point in loss] == pytest.approx([float(row["loss"]) for row in rows], rel=1e-6)
    assert len(throughput) == len(rows) and all(point[2] > 0 for point in throughput)
