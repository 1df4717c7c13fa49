"""How the suite is laid out and run: its markers, its xdist groups and its order (a plugin of tests/conftest.py).

One command runs it all on two cores (README, `.ci/run`):

    .venv/bin/python -m pytest -n 2 --dist loadfile --durations=25

- Markers (registered in pyproject.toml) are given here, by path and by fixture, so the test files stay as they
  are: `slow` (over ~30 s on a 2-core machine, measured: SLOW below), `real_model` (PaddleOCR's PP-OCRv4 models),
  `server` (a SeaweedFS or Prefect server process), `forks` (DataLoader workers or training ranks) and `exclusive`
  (a timing- or memory-sensitive test: while it runs the other xdist worker starts nothing).
  `pytest -n 2 --dist loadfile -m "not slow"` is the developer's loop.
- A module runs whole on one worker (`--dist loadfile`): its module-scoped fixtures (a pipeline run, a model
  import) are made once. Session fixtures (the digits stages, the SeaweedFS server, the Prefect servers, the
  released store) are made at most once per worker. Not `--dist loadgroup`: pytest-xdist 3.8 marks a group by
  rewriting `item._nodeid`, which pytest 9 no longer reads, so every test went its own way.
- The modules that take longest are handed out first, so the two workers finish together.
"""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

# Tests over ~30 s on the 2-core machine (`--durations=0`, one process, load ~2; setup of a module's shared
# fixtures counted in its first test). A module listed whole has most of its time in a module fixture.
SLOW = {
    # filled from measured durations
}

# Modules whose tests start their own server processes (beside those fixtures SERVER_FIXTURES start).
SERVER_MODULES = {
    "tests/integration/test_prefect_server.py",
    "tests/integration/test_cli_prefect_api.py",
    "tests/integration/test_cli.py",  # `quantgate run` with its embedded temporary Prefect server
}
SERVER_FIXTURES = {"s3_server", "quantgate_cli", "prefect_server"}

# Modules that fork DataLoader workers in the test process or launch training ranks.
FORKS_MODULES = {
    "tests/stages/test_image_folders.py",
    "tests/stages/test_moved_data.py",
    "tests/stages/test_quantize_streaming.py",
    "tests/stages/test_train_streaming.py",
    "tests/stages/test_train_distributed.py",
    "tests/flows/test_image_folder_release.py",
    "tests/flows/test_distributed_release.py",
}

# Timing- or memory-sensitive: kill windows, time limits measured from a kill, races lined up by the clock.
EXCLUSIVE = {
    "tests/artifacts/test_s3_faults.py",
    "tests/artifacts/test_store_processes.py",
}

# Seconds each module took (measured as SLOW was); modules not named count 0. Only the order uses it.
MODULE_SECONDS: dict[str, float] = {
    # filled from measured durations
}

_ROOT = Path(__file__).resolve().parents[2]


def _module(item: pytest.Item) -> str:
    return Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()


def _uses_real_models(module: str, cache: dict[str, bool]) -> bool:
    if module not in cache:
        cache[module] = "paddleocr_models" in (_ROOT / module).read_text(encoding="utf-8")
    return cache[module]


def _is_slow(item: pytest.Item, module: str) -> bool:
    if module in SLOW:
        return True
    name = f"{module}::{item.name}"
    return name in SLOW or name.split("[")[0] in SLOW


def _uses_server(item: pytest.Item, module: str) -> bool:
    if module in SERVER_MODULES or SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)  # tests/artifacts' `spec` fixture: "s3" is a bucket on the server
    return callspec is not None and callspec.params.get("spec") == "s3"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    real_models: dict[str, bool] = {}
    for item in items:
        module = _module(item)
        if _is_slow(item, module):
            item.add_marker(pytest.mark.slow)
        if _uses_real_models(module, real_models):
            item.add_marker(pytest.mark.real_model)
        if _uses_server(item, module):
            item.add_marker(pytest.mark.server)
        if module in FORKS_MODULES:
            item.add_marker(pytest.mark.forks)
        if module in EXCLUSIVE:
            item.add_marker(pytest.mark.exclusive)
    # Longest modules first (a stable sort: a module's tests keep their order, modules of equal weight too).
    first_seen = {}
    for index, item in enumerate(items):
        first_seen.setdefault(_module(item), index)
    items.sort(key=lambda item: (-MODULE_SECONDS.get(_module(item), 0.0), first_seen[_module(item)]))


def _lock_folder(config: pytest.Config) -> Path | None:
    """A folder both xdist workers of this run share; None in a single process (nothing runs beside a test)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    folder = Path(tempfile.gettempdir()) / f"quantgate-suite-{workerinput['testrunuid']}"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """An `exclusive` test runs alone: the other worker finishes its current test and starts no other meanwhile.

    Every test holds `running` shared, an exclusive one holds it exclusively. The `turnstile` is taken on the way
    in; an exclusive test keeps it until it ends, so a worker cannot slip new shared tests past one waiting.
    POSIX record locks (lockf), not flock: a forked DataLoader worker does not inherit them, and the store's
    tests count this process's flocks (tests/artifacts/test_locks.py).
    """
    folder = _lock_folder(item.config)
    if folder is None:
        return (yield)
    exclusive = item.get_closest_marker("exclusive") is not None
    with open(folder / "turnstile", "a+") as turnstile, open(folder / "running", "a+") as running:
        fcntl.lockf(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.lockf(running, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.lockf(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.lockf(running, fcntl.LOCK_UN)
            if exclusive:
                fcntl.lockf(turnstile, fcntl.LOCK_UN)
