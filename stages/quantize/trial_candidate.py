"""A trial's candidate, built the same way whoever produces it (`paddleslim_producer`, `onnx_candidates`): its
settings calibrated (or taken from the cache), lowered into the trial's own folder, timed and recorded."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from quantgate.config import QuantizeConfig
from quantgate.stages.quantize.candidate_cache import CALIBRATION_METRICS, recipe_record
from quantgate.stages.quantize.runtime_checks import Candidate

# A producer's calibration: (its folder, holding CALIBRATION_METRICS; its digest; whether it was made before).
Calibrate = Callable[[QuantizeConfig], tuple[Path, str, bool]]
# A producer's lowering of a calibration folder into the INT8 ONNX file named; returns the Candidate fields only it
# knows (program, unlowered_onnx, calibration_folder).
Lower = Callable[[Path, Path], dict]


def trial_candidate(producer: str, scratch: Path, index: int, settings: QuantizeConfig,
                    float_layers: Iterable[str], calibrate: Calibrate, lower: Lower) -> Candidate:
    """`settings` calibrated by `calibrate` and lowered by `lower` into `scratch`/trial-`index`/int8.onnx, for the
    search to judge; the calibration's time and the whole production's are measured here."""
    started = time.monotonic()
    calibration, digest, cached = calibrate(settings)
    calibration_s = time.monotonic() - started
    calibrated = json.loads((calibration / CALIBRATION_METRICS).read_text())
    folder = scratch / f"trial-{index:03d}"
    folder.mkdir()
    produced = lower(calibration, folder / "int8.onnx")
    return Candidate(
        int8_onnx=folder / "int8.onnx", recipe=recipe_record(settings), float_layers=tuple(float_layers),
        calibration_samples=calibrated["calibration_samples"], calibration_digest=digest,
        calibration_s=calibration_s, produced_s=time.monotonic() - started, producer=producer,
        calibration_cached=cached, statistics_reused=bool(calibrated.get("calibration_statistics_reused")),
        **produced)
