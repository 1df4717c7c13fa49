"""Helpers for the CLI tests that run many short pipelines (fixtures live in conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# The speed floor is waived: 3 latency repeats on a busy 2-core machine measure noise.
TINY_RUN = ["--epochs", "3", "--set", "evaluate.latency_repeats=3", "--set", "gate.min_speedup=0"]
MODEL = "digits-cnn"


def quantgate_executable() -> str:
    beside_python = Path(sys.executable).parent / "quantgate"
    executable = str(beside_python) if beside_python.exists() else shutil.which("quantgate")
    assert executable, "the quantgate console script is not installed (pip install -e .)"
    return executable


@dataclass(frozen=True)
class Runner:
    """Runs `quantgate` as a user would, against the shared Prefect server."""

    env: dict

    def run(self, *args: str, timeout: int = 300, **popen) -> subprocess.CompletedProcess:
        return subprocess.run([quantgate_executable(), *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, **popen)

    def start(self, *args: str, **popen) -> subprocess.Popen:
        # Own session: the test can kill the whole process group, as an OOM killer or `kill -9` would.
        return subprocess.Popen([quantgate_executable(), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=self.env, start_new_session=True, **popen)


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def alias_bytes(store: Path) -> dict[str, bytes]:
    """Every alias file's bytes, to prove none changed."""
    aliases = store / MODEL / "aliases"
    return {path.name: path.read_bytes() for path in sorted(aliases.glob("*.json"))}


def versions_dir(store: Path) -> Path:
    return store / MODEL / "versions"
