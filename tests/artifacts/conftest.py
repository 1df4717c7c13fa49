"""Fixtures shared by the artifact store tests: a fresh store and a helper that commits a stage."""

import pytest

from quantgate.artifacts import ArtifactStore, StageRef, VersionRef


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
