"""The Dockerfile stays in step with pyproject.toml and .ci/image, read as text (no build: .ci/image builds it)."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def stage(name: str) -> str:
    """The instructions of one build stage, from its FROM line to the next."""
    parts = re.split(r"^(?=FROM )", DOCKERFILE, flags=re.MULTILINE)
    matches = [part for part in parts if re.match(rf"FROM \S+ AS {name}\b", part)]
    assert len(matches) == 1, f"no single stage {name!r} in the Dockerfile"
    return matches[0]


def global_arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE.split("\nFROM ", 1)[0], flags=re.MULTILINE)
    assert match, f"no global ARG {name}=... before the first FROM"
    return match.group(1)


def copied(stage_text: str) -> set[str]:
    """Every path a stage COPYs from the build context."""
    sources = set()
    for line in re.findall(r"^COPY (.+)$", stage_text, flags=re.MULTILINE):
        words = line.split()
        if not any(word.startswith("--from") for word in words):
            sources.update(word for word in words[:-1] if not word.startswith("--"))
    return sources


def test_gpu_image_takes_the_gpu_wheel_of_the_pinned_paddle_version():
    pins = [dep for dep in PYPROJECT["project"]["dependencies"] if dep.startswith("paddlepaddle==")]
    assert pins == [f"paddlepaddle=={global_arg('PADDLE_VERSION')}"]
    gpu = stage("gpu")
    assert 'pip install "paddlepaddle-gpu==${PADDLE_VERSION}"' in gpu
    assert "not d.startswith('paddlepaddle==')" in gpu, "the CPU wheel would be installed over the GPU one"
    assert "pip install --no-deps -e ." in gpu
    assert "paddle.is_compiled_with_cuda()" in gpu


def test_cpu_image_builds_on_python_slim_unless_told_otherwise():
    assert global_arg("BASE_IMAGE") == "python:3.11-slim"
    assert stage("cpu").startswith("FROM ${BASE_IMAGE} AS cpu")


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_every_package_folder_goes_into_the_image(name):
    package_folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    sources = copied(stage(name))
    assert package_folders <= sources, f"the {name} image misses {sorted(package_folders - sources)}"
    assert {"pyproject.toml", "README.md"} <= sources, "pip install -e . reads both"
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such path"
        excluded = [pattern for pattern in ignored if not pattern.startswith("!") and fnmatch.fnmatch(source, pattern)]
        kept = [pattern for pattern in ignored if pattern.startswith("!") and fnmatch.fnmatch(source, pattern[1:])]
        assert not excluded or kept, f"COPY {source}, but .dockerignore leaves it out ({excluded})"


def test_ci_wheelhouse_is_git_ignored_but_reaches_the_build():
    script = (ROOT / ".ci" / "image").read_text()
    wheelhouse = re.search(r"^wheelhouse=(\S+)$", script, flags=re.MULTILINE).group(1)
    assert f"/{wheelhouse}/" in (ROOT / ".gitignore").read_text().splitlines()
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert not any(fnmatch.fnmatch(wheelhouse, line.strip()) for line in ignored if line.strip()), (
        f".dockerignore hides {wheelhouse} from the build")
    assert '--build-arg WHEELHOUSE="$wheelhouse"' in script
    assert "ARG WHEELHOUSE=" in stage("cpu")


def test_ci_image_script_parses():
    result = subprocess.run(["bash", "-n", str(ROOT / ".ci" / "image")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
