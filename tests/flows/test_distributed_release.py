"""`train.nproc: 2`: the release flow trains on two gloo processes and ships what both ranks agree on."""

import hashlib
import json
import math

import numpy as np

from quantgate.flows.release import release
from quantgate.stages.train.distributed import weights_sha256


def test_two_process_training_ends_with_identical_weights_recorded_in_the_manifest(tmp_path, tiny_config):
    root = tmp_path / "store"
    config = tiny_config(train={"epochs": 1, "nproc": 2},
                         gate={"max_accuracy_drop": 100, "min_agreement": 0, "min_speedup": 0})  # plumbing
    version = release(config=config, store=str(root))
    version_dir = root / "digits-cnn" / "versions" / version

    train = json.loads((version_dir / "train" / "manifest.json").read_text())
    distributed = train["metrics"]["distributed"]
    assert distributed["world_size"] == 2 and distributed["backend"] == "gloo"
    digests = distributed["rank_weights_sha256"]
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]
    with np.load(version_dir / "train" / "weights.npz") as stored:  # every BatchNorm's running mean and variance
        running = [name for name in stored.files if name.endswith(("._mean", "._variance"))]
    assert running and distributed["running_statistics_averaged"] == len(running)
    with np.load(version_dir / "train" / "weights.npz") as stored:
        assert weights_sha256({name: stored[name] for name in stored.files}) == digests["0"]
    # The launcher's logs are kept, hashed, with the stage.
    assert {"launch/logs/workerlog.0", "launch/logs/workerlog.1", "launch/rank0.json", "launch/rank1.json"} <= set(train["files"])
    # Each rank saw its own shard (DistributedBatchSampler): half of the training digits, in batches of 64.
    samples = json.loads((version_dir / "data" / "manifest.json").read_text())["metrics"]["samples_train"]
    steps = (version_dir / "train" / "steps.csv").read_text().splitlines()[1:]
    assert len(steps) == train["metrics"]["steps"] == math.ceil(math.ceil(samples / 2) / 64)
    assert train["metrics"]["scaler"]["steps"] == len(steps) and train["metrics"]["scaler"]["skipped_steps"] == 0

    record = json.loads((version_dir / "version.json").read_text())
    assert record["status"] == "passed" and record["config"]["train"]["nproc"] == 2
    export = json.loads((version_dir / "export" / "manifest.json").read_text())
    assert export["metrics"]["max_abs_diff_vs_trained"] <= 1e-4
    assert hashlib.sha256((version_dir / "train" / "weights.npz").read_bytes()).hexdigest() == train["files"]["weights.npz"]["sha256"]
