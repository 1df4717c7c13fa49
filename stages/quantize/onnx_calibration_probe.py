"""What calibrating a PIR model's ONNX graph costs per sample, measured in a child process (`quantgate.memory.probe`, from `pir_seam.calibration_bytes`):
`python -m quantgate.stages.quantize.onnx_calibration_probe --graph G --shape C H W --batch B` builds the calibration
session (every measured tensor an output) and measures one batch of zeros as calibration does (`onnx_calibration.
measure`, one-pass histograms), twice; the probe reads its high-water mark. onnxruntime's arena, its outputs,
numpy's copies and the statistics' temporaries are all in it: an estimate from the tensors' sizes alone fell short
(PP-OCRv4 rec: peak 8.79 GB against a batch sized for 7.58)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def _load(graph: Path):
    import onnx

    from quantgate.int8.paddle2onnx_qdq import (
        constants_as_initializers,
        fold_batch_norms,
        observed_tensors,
        quantizable_layers,
    )

    model = constants_as_initializers(onnx.load(str(graph)))
    fold_batch_norms(model)
    return model, observed_tensors(model, quantizable_layers(model))


def main() -> None:
    from quantgate.memory.probe import run_probe
    from quantgate.stages.quantize.onnx_calibration import measure

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", type=Path, required=True)
    parser.add_argument("--shape", type=int, nargs="+", required=True)
    parser.add_argument("--batch", type=int, required=True)
    arguments = parser.parse_args()

    def run_at(loaded, size: int) -> None:
        model, names = loaded
        images = np.zeros((size, *arguments.shape), np.float32)
        measure(model, names, lambda: iter([images]), "hist", "one_pass")

    run_probe(lambda: _load(arguments.graph), run_at, arguments.batch)


if __name__ == "__main__":
    main()
