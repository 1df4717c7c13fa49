"""Never killed for memory: PP-OCRv4's detector imported with a budget below what its default batches need gets
smaller batches and finishes within the budget (the test samples the run's whole process tree itself); a batch
set by hand that fits is kept, one that does not is lowered with the reason recorded; latency is timed at the
fixed batch whatever the budget; a budget below one sample, or below the latency batch, is refused before any version
exists."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.ocr_samples import paddleocr_models  # noqa: E402

from quantgate.artifacts import ArtifactStore  # noqa: E402
from quantgate.demo.pages import write_demo_dataset  # noqa: E402
from quantgate.memory import BATCHES_KEY, PEAK_KEY, tree_memory_bytes  # noqa: E402

MODEL = "ppocrv4-det"
PAGE = {"color": "bgr", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "det_limit_side_len": 640,
        "det_canvas": [640, 640]}
# At 640x640 calibration holds ~0.6 GB a page: quantize.batch_size 32 would need ~20 GB beside the run's ~1 GB.
BUDGET_GB = 2.6
SHARED_LIBRARY_PAGES_GB = 0.5  # Paddle's and the runtimes' libraries: resident once, in every process's RSS


def detector_config(models, pages: Path) -> dict:
    return {"task": "text_detection", "model_name": MODEL, "trained_model": {"path": str(models.det)},
            "data": {"dataset": "text_boxes", "path": str(pages), "label_file": str(pages / "calibration.txt"),
                     "test_label_file": str(pages / "test.txt"), "num_workers": 0, "transforms": PAGE},
            "quantize": {"strategy": "single", "batch_size": 32},  # more than fits: lowered
            "evaluate": {"runtimes": ["onnxruntime"], "batch_size": 2, "latency_batch_size": 3,
                         "latency_repeats": 3},
            "gate": {"min_speedup": 0, "min_paired_samples": 4}}


class TreePeak:
    """The largest resident memory of a process and all its descendants (PSS), sampled every 50 ms."""

    def __init__(self, process: psutil.Process):
        self.process, self.peak, self._done = process, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.05) and self.process.is_running():
            self.peak = max(self.peak, tree_memory_bytes(self.process))  # shared pages once, as the kernel counts

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


@dataclass(frozen=True)
class BudgetedRun:
    returncode: int
    output: str
    peak_bytes: int
    store: ArtifactStore


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pages")
    write_demo_dataset(folder, 10, seed=3, test_fraction=0.4)
    return folder


@pytest.fixture(scope="module")
def budgeted(quantgate_cli, pages, tmp_path_factory) -> BudgetedRun:
    base = tmp_path_factory.mktemp("budgeted")
    config = base / "detector.yaml"
    config.write_text(yaml.safe_dump(detector_config(paddleocr_models(), pages)), encoding="utf-8")
    run = quantgate_cli.start("run", "--config", str(config), "--store", str(base / "store"),
                              "--memory-gb", str(BUDGET_GB))
    peak = TreePeak(psutil.Process(run.pid))
    output, _ = run.communicate(timeout=900)
    return BudgetedRun(run.returncode, output, peak.stop(), ArtifactStore(base / "store"))


def metrics(run: BudgetedRun, stage: str) -> dict:
    store = run.store
    return store.read_manifest(store.finalized_stage_ref(store.version(MODEL, "v1"), stage))["metrics"]


def test_a_budget_below_the_default_batches_needs_finishes_with_smaller_batches_within_the_budget(budgeted):
    assert budgeted.returncode == 0, budgeted.output[-4000:]
    calibration = metrics(budgeted, "quantize")[BATCHES_KEY]["calibration"]
    assert calibration["requested"] == 32 and 1 <= calibration["batch_size"] < 32
    assert calibration["budget_gb"] == BUDGET_GB and calibration["budget_source"] == f"QUANTGATE_MEMORY_GB={BUDGET_GB!r}"
    assert "quantize.batch_size=32 lowered to" in calibration["reason"]
    assert calibration["estimated_gb"] <= BUDGET_GB
    # hist measures each page: the lowered batch cannot change the scales, and the record says so
    assert calibration["scales_may_differ_from_requested_batch"] is False
    assert budgeted.peak_bytes <= BUDGET_GB * 1e9, f"the run's process tree peaked at {budgeted.peak_bytes / 1e9:.2f} GB"
    # each stage's manifest says what it used, as the run's own measure saw it: its own high-water mark (RSS)
    # counts whole the library pages its child processes share, which the PSS sampled here splits among them
    for stage in ("quantize", "evaluate"):
        assert 0.3 < metrics(budgeted, stage)[PEAK_KEY] <= BUDGET_GB + SHARED_LIBRARY_PAGES_GB


def test_the_reference_outputs_are_sized_by_measuring_the_forward_run_where_the_shapes_bound_does_not_fit(budgeted):
    # every activation of a 640x640 page at once (0.6 GB a page) would let 2 of the 4 test pages run together; the
    # executor frees each after its last use, which a child process running pages 1 and 3 measures
    reference = metrics(budgeted, "export")[BATCHES_KEY]["reference outputs"]
    assert reference["measured_by"] == "probed at batches 1 and 3 in a child process", reference
    assert reference["batch_size"] >= 4 and reference["estimated_gb"] <= BUDGET_GB


def test_an_evaluate_batch_that_fits_is_kept_and_latency_is_timed_at_its_fixed_batch(budgeted):
    evaluated = metrics(budgeted, "evaluate")
    accuracy = evaluated[BATCHES_KEY]["evaluate accuracy pass"]
    assert (accuracy["requested"], accuracy["batch_size"]) == (2, 2)
    assert accuracy["reason"] == "evaluate.batch_size=2 fits the budget"
    assert evaluated["latency_batch_size"] == 3
    assert evaluated[BATCHES_KEY]["evaluate latency in onnxruntime"]["batch_size"] == 3


def test_a_budget_below_one_sample_refuses_before_any_version_exists(quantgate_cli, pages, tmp_path):
    config = tmp_path / "detector.yaml"
    config.write_text(yaml.safe_dump(detector_config(paddleocr_models(), pages)), encoding="utf-8")
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(tmp_path / "store"),
                               "--memory-gb", "0.3", timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    message = " ".join(result.stderr.split())
    for part in ("ch_PP-OCRv4_det_infer/inference.pdmodel on inputs of 3x640x640", "per sample",
                 "over the memory budget of 0.30 GB (QUANTGATE_MEMORY_GB=0.3)", "--memory-gb", "data.transforms",
                 "nothing was run"):
        assert part in message, message
    assert not (tmp_path / "store" / MODEL / "versions").exists() or \
        not any((tmp_path / "store" / MODEL / "versions").iterdir())


def test_a_latency_batch_the_budget_cannot_time_is_refused_before_any_version_exists(quantgate_cli, pages, tmp_path):
    # 16 pages of 640x640 through onnxruntime's FP32 and INT8 models need several GB; one calibration page fits 2.6 GB.
    # The shapes decide it before the first stage: nothing is stored, and the message is the evaluate stage's own.
    settings = detector_config(paddleocr_models(), pages)
    settings["evaluate"] = {**settings["evaluate"], "latency_batch_size": 16}
    config = tmp_path / "detector.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    result = quantgate_cli.run("run", "--config", str(config), "--store", str(tmp_path / "store"),
                               "--memory-gb", str(BUDGET_GB), timeout=600)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    message = " ".join(result.stderr.split())
    for part in ("evaluate latency in onnxruntime: evaluate.latency_batch_size=16 needs about",
                 f"over the memory budget of {BUDGET_GB:.2f} GB (QUANTGATE_MEMORY_GB={BUDGET_GB!r})",
                 "lower evaluate.latency_batch_size (the batch fits up to", "--memory-gb", "nothing was run"):
        assert part in message, message
    assert not (tmp_path / "store" / MODEL / "versions").exists() or \
        not any((tmp_path / "store" / MODEL / "versions").iterdir())
