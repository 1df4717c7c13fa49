"""A run's processes die with it: `quantgate run` killed with SIGKILL leaves none of its processes behind.

Each test starts the real CLI on tiny image folders (so DataLoader workers decode them, data.num_workers 2)
with Prefect's temporary server (no PREFECT_API_URL, as a user's first run), waits until the processes of
one moment exist, walks the run's tree, SIGKILLs the `quantgate run` process alone (as `kill -9` or the OOM
killer would), and checks every pid of that tree (by start time) within a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from cli_runs import quantgate_executable
from process_trees import end_all, kill_and_survivors, kinds, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
from folder_images import write_image_folder  # noqa: E402

MODEL = "shapes"
WORKER = "forked worker (DataLoader)"


def image_folder_config(images: Path, epochs: int, latency_repeats: int = 3) -> dict:
    return {
        "model_name": MODEL,
        "data": {"dataset": "image_folder", "path": str(images), "test_fraction": 0.25, "calibration_fraction": 0.25,
                 "validation_fraction": 0.125, "num_workers": 2,
                 "transforms": {"resize": 32, "center_crop": 32, "mean": [0.5], "std": [0.5]}},
        "train": {"architecture": "mobilenet_v1", "epochs": epochs, "batch_size": 6},
        "quantize": {"strategy": "single", "algo": "abs_max", "batch_size": 2},
        "evaluate": {"latency_repeats": latency_repeats},
        "gate": {"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0, "min_paired_samples": 2},
    }


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    """One PREFECT_HOME for this module's runs: the temporary server's database is created once."""
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("images") / "images", classes=3, per_class=8)


def start_run(tmp_path: Path, prefect_home: Path, config: dict) -> tuple[subprocess.Popen, Path]:
    """`quantgate run --config ...` with Prefect's temporary server, in its own session; (process, store)."""
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(config))
    store = tmp_path / "store"
    env = {**os.environ, "HOME": str(prefect_home), "PREFECT_HOME": str(prefect_home / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    env.pop("QUANTGATE_STORE", None)
    log = open(tmp_path / "run.out", "wb")  # noqa: SIM115 - the child writes it; closed with the test
    process = subprocess.Popen([quantgate_executable(), "run", "--config", str(config_file), "--store", str(store)],
                               stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    return process, store


def committed(store: Path, stage: str, model: str = MODEL) -> bool:
    return (store / model / "versions" / "v1" / stage / "manifest.json").exists()


def kill_at(tmp_path: Path, prefect_home: Path, config: dict, ready, timeout_s: float = 240) -> tuple[list, list]:
    """Start a run, SIGKILL it once `ready(tree, store)` holds; (its tree at the kill, the survivors)."""
    process, store = start_run(tmp_path, prefect_home, config)
    members = []
    try:
        run = psutil.Process(process.pid)
        members = wait_for(run, lambda found: ready(found, store), timeout_s,
                           lambda: (tmp_path / "run.out").read_text(errors="replace")[-3000:])
        killed = time.monotonic()
        survivors = kill_and_survivors(process.pid, members)
        print(f"\nkilled with: {kinds(members)}\nsurvived: {kinds(survivors)} "  # the kill matrix, with -s
              f"(checked for {time.monotonic() - killed:.1f} s)")
        process.wait(10)
        return members, survivors
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        end_all(members)


def test_killed_while_the_temporary_server_is_up_leaves_no_server(tmp_path, prefect_home):
    members, survivors = kill_at(tmp_path, prefect_home, {"model_name": MODEL},
                                 lambda found, store: "prefect temporary server" in kinds(found))
    assert "prefect temporary server" in kinds(members)
    assert survivors == [], f"outlived the run: {survivors}"


def test_killed_in_training_leaves_no_data_workers_or_server(tmp_path, prefect_home, images):
    members, survivors = kill_at(
        tmp_path, prefect_home, image_folder_config(images, epochs=200),
        lambda found, store: committed(store, "data") and not committed(store, "train") and WORKER in kinds(found))
    assert {WORKER, "prefect temporary server"} <= set(kinds(members))
    assert survivors == [], f"outlived the run: {survivors}"


def test_killed_in_calibration_leaves_no_data_workers(tmp_path, prefect_home, images):
    members, survivors = kill_at(
        tmp_path, prefect_home, image_folder_config(images, epochs=1),
        lambda found, store: committed(store, "export") and not committed(store, "quantize")
        and WORKER in kinds(found))
    assert WORKER in kinds(members)
    assert survivors == [], f"outlived the run: {survivors}"


def test_killed_in_evaluation_leaves_no_latency_child(tmp_path, prefect_home, images):
    members, survivors = kill_at(tmp_path, prefect_home, image_folder_config(images, epochs=1, latency_repeats=4000),
                                 lambda found, store: "latency child" in kinds(found))
    assert "latency child" in kinds(members)
    assert survivors == [], f"outlived the run: {survivors}"


def test_killed_in_data_parallel_training_leaves_no_launcher_or_ranks(tmp_path, prefect_home):
    config = {"model_name": MODEL, "train": {"nproc": 2, "epochs": 200}}
    members, survivors = kill_at(tmp_path, prefect_home, config,
                                 lambda found, store: kinds(found).count("training rank") == 2)
    assert "training launcher" in kinds(members)
    assert survivors == [], f"outlived the run: {survivors}"
