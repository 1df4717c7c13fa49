"""How well PP-OCRv4's recognizer (FP32, Paddle Inference) reads financial lines rendered with each given font.

The font that renders the test data decides part of what the tests and benchmarks measure, so a change of font is
measured first: the same texts (the same seed), clean and degraded, each font in turn.

    python benchmarks/font_reading.py --lines 300 --seed 7 \\
        --font packaged \\
        --font zenhei=/tmp/fx/wqy-zenhei.ttc          # apt-get download fonts-wqy-zenhei; dpkg -x it

`packaged` is the font quantgate installs (noto-cjk-sans-otc). Prints one markdown row per font and kind.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.degraded_lines import render_degraded_lines  # noqa: E402
from support.ocr_samples import paddleocr_models, read_lines, render_financial_lines  # noqa: E402

from quantgate.pictures.fonts import packaged_cjk_font  # noqa: E402

RENDERERS = {"clean": render_financial_lines, "degraded": render_degraded_lines}


def line_accuracy(models, font: Path, kind: str, lines: int, seed: int, work: Path) -> float:
    """Share of `lines` rendered with `font` that the recognizer reads exactly, in %."""
    folder = work / f"{font.stem}-{kind}"
    entries = RENDERERS[kind](folder, lines, seed=seed, font=font)
    read = read_lines(models, [folder / path for path, _ in entries])
    return 100.0 * sum(got == text for got, (_, text) in zip(read, entries)) / len(entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--font", action="append", required=True,
                        help="NAME=PATH of a .ttf/.ttc/.otf, or 'packaged' for quantgate's own")
    arguments = parser.parse_args()
    models = paddleocr_models()
    print(f"{arguments.lines} lines of seed {arguments.seed}, each kind\n\n"
          "| font | file | clean lines read (%) | degraded lines read (%) |\n|---|---|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="quantgate-fonts-") as work:
        for given in arguments.font:
            name, _, path = given.partition("=")
            font = packaged_cjk_font() if given == "packaged" else Path(path)
            scores = [line_accuracy(models, font, kind, arguments.lines, arguments.seed, Path(work))
                      for kind in RENDERERS]
            print(f"| {name} | {font.name} | {scores[0]:.2f} | {scores[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
