"""`quantgate demo-pages OUT`: demo pages for text detection (cheques, invoices, bank slips) with PaddleOCR labels.

Writes OUT/pages/*.png, OUT/calibration.txt and OUT/test.txt (PaddleOCR's `page.png<TAB>boxes JSON` lines), so a
detector or OCR-system config can be tried without downloading a dataset. Exit codes: 0 written, 2 bad input
(a split left empty, or no CJK font installed).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands) -> None:
    parser = commands.add_parser("demo-pages", help="write demo pages with text-detection labels (offline)")
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to write pages/ and the label files into")
    parser.add_argument("--pages", type=int, default=200, metavar="N", help="how many pages (default: 200)")
    parser.add_argument("--seed", type=int, default=0, help="the same seed and font give the same pages (default: 0)")
    parser.add_argument("--test-fraction", type=float, default=0.5, metavar="F",
                        help="share of the pages in test.txt; the rest go to calibration.txt (default: 0.5)")
    parser.add_argument("--font", type=Path, help="a .ttf/.ttc font with Chinese glyphs (default: an installed "
                                                  "one, WenQuanYi Zen Hei preferred)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Render the pages and write both label files.

    Raises:
        DemoError: a split would be empty, or the font is missing (NoCjkFont).
    """
    from quantgate.demo.pages import PAGES_FOLDER, write_demo_dataset
    from quantgate.demo.text import DemoError

    if args.font is not None and not args.font.is_file():
        raise DemoError(f"--font {args.font} is not a file; pass a .ttf/.ttc font with Chinese glyphs")
    written = write_demo_dataset(args.out, args.pages, args.seed, args.test_fraction, font=args.font)
    counts = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in written.items()}
    print(f"wrote {args.pages} pages under {args.out / PAGES_FOLDER}: {counts['calibration']} in "
          f"{written['calibration']}, {counts['test']} in {written['test']}")
    return 0
