import numpy as np
import pytest

from quantgate.config import DataConfig
from quantgate.stages.data import open_data, prepare_data


def test_split_is_deterministic_disjoint_and_stratified(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    a = prepare_data(DataConfig(seed=3), first)
    b = prepare_data(DataConfig(seed=3), second)
    assert a.metrics["fingerprint_sha256"] == b.metrics["fingerprint_sha256"]
    assert (first / "splits.npz").read_bytes() == (second / "splits.npz").read_bytes()

    with np.load(first / "splits.npz") as stored:
        indices = [set(stored[f"index_{name}"].tolist()) for name in ("train", "calibration", "validation", "test")]
    assert all(not (a & b) for i, a in enumerate(indices) for b in indices[i + 1:])  # pairwise disjoint
    assert sum(map(len, indices)) == 1797  # every real digit is used exactly once

    data = open_data(first)
    for name in ("train", "calibration", "validation", "test"):
        assert set(data.labels(name).tolist()) == set(range(10))
    images, _ = data.array("test")
    assert images.dtype == np.float32 and data.input_shape == (1, 8, 8) == images.shape[1:]
    assert 0.0 <= images.min() and images.max() <= 1.0 and not data.on_disk


def test_fingerprint_changes_with_the_split(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = prepare_data(DataConfig(seed=0), tmp_path / "a")
    b = prepare_data(DataConfig(seed=1), tmp_path / "b")
    assert a.metrics["fingerprint_sha256"] != b.metrics["fingerprint_sha256"]


def test_unknown_dataset_is_refused_by_the_schema():
    from quantgate.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match="data.dataset.*'digits'"):
        validate_config({"data": {"dataset": "mnist"}})
