"""The content-addressed cache: atomic entries, verified on every read, never overwritten."""

import pytest

from quantgate.artifacts import ArtifactStore
from quantgate.artifacts.cache import ContentCache
from quantgate.artifacts.fsck import check_store


def test_an_entry_appears_whole_or_not_at_all(tmp_path):
    cache = ContentCache(tmp_path, "kind")
    assert cache.get("d1") is None
    with pytest.raises(RuntimeError):
        with cache.fill("d1") as folder:
            (folder / "half.bin").write_bytes(b"x")
            raise RuntimeError("calibration failed")
    assert cache.get("d1") is None and not list((tmp_path / ".cache" / "kind").iterdir())
    with cache.fill("d1") as folder:
        (folder / "model.bin").write_bytes(b"weights")
    assert (cache.get("d1") / "model.bin").read_bytes() == b"weights"


def test_a_damaged_entry_is_a_miss_and_is_set_aside(tmp_path):
    cache = ContentCache(tmp_path, "kind")
    with cache.fill("d1") as folder:
        (folder / "model.bin").write_bytes(b"weights")
    (cache.get("d1") / "model.bin").write_bytes(b"tampered")
    assert cache.get("d1") is None
    assert [path.name.startswith(".damaged-d1-") for path in (tmp_path / ".cache" / "kind").iterdir()] == [True]
    with cache.fill("d1") as folder:  # refilled from scratch
        (folder / "model.bin").write_bytes(b"weights")
    assert (cache.get("d1") / "model.bin").read_bytes() == b"weights"


def test_the_first_fill_of_a_digest_stands(tmp_path):
    cache = ContentCache(tmp_path, "kind")
    with cache.fill("d1") as first:
        with cache.fill("d1") as second:
            (second / "model.bin").write_bytes(b"one")
        (first / "model.bin").write_bytes(b"two")
    assert (cache.get("d1") / "model.bin").read_bytes() == b"one"
    assert [path.name for path in (tmp_path / ".cache" / "kind").iterdir()] == ["d1"]


def test_the_cache_is_no_model_to_the_store(tmp_path):
    store = ArtifactStore(tmp_path)
    with store.cache("quantize-search").fill("d1") as folder:
        (folder / "model.bin").write_bytes(b"weights")
    assert store.models() == [] and check_store(store) == []  # fsck neither lists nor flags it
