"""Fixtures shared by the artifact store tests: a fresh store, a helper that commits a stage, and both kinds of
store (`spec`: a folder, or a bucket on the real S3 server) opened as separate machines would open them."""

import os

import pytest

from quantgate.artifacts import ArtifactStore, StageRef, VersionRef, open_store
from quantgate.artifacts.s3.store import CACHE_ENV


@pytest.fixture
def store(tmp_path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "store")


@pytest.fixture
def commit_stage(store):
    """Commit `files` ({relpath: bytes}) as `stage` of `version`; return its StageRef."""

    def commit(version: VersionRef, stage: str, files: dict[str, bytes], metrics: dict | None = None,
               inputs: dict[str, StageRef] | None = None) -> StageRef:
        with store.write_stage(version, stage, config={"stage": stage}, inputs=inputs or {}) as writer:
            for relpath, data in files.items():
                path = writer.dir / relpath
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            writer.metrics.update(metrics or {})
        return writer.ref

    return commit


@pytest.fixture(params=["local", "s3"])
def spec(request, tmp_path) -> str:
    """What the user would pass as --store: a folder, or s3://BUCKET/store in a fresh bucket."""
    return request.getfixturevalue("s3_url") if request.param == "s3" else str(tmp_path / "store")


@pytest.fixture
def worker_env(tmp_path):
    """worker_env(name): the environment of a process on machine `name` (its own $QUANTGATE_S3_CACHE)."""
    return lambda name: {**os.environ, CACHE_ENV: str(tmp_path / f"mirror-{name}")}


@pytest.fixture
def open_worker(spec, worker_env, monkeypatch):
    """open_worker(name): the store `spec` names, opened as a process on machine `name` opens it (same mirror)."""

    def open_as(name: str) -> ArtifactStore:
        with monkeypatch.context() as patch:
            patch.setenv(CACHE_ENV, worker_env(name)[CACHE_ENV])
            return open_store(spec)

    return open_as
