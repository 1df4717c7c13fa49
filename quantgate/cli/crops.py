"""`quantgate crops PAGES OUT`: a recognizer's data cut from labelled pages the way the OCR system cuts its lines.

Each labelled box of each label file (PaddleOCR detection labels, relative to PAGES) is straightened as the
system straightens a detected box, and written as OUT/crops/<page>/<box>.png with OUT/<label file's name> in
PaddleOCR's recognition layout (`crops/pages/0_00000/003.png<TAB>text`): point a `text_recognition` config's
data.path at OUT, with the system recognizer's rec_image_shape, and it is calibrated and judged on the crops the
system feeds it. Exit codes: 0 written, 2 bad input (a label file or page that cannot be read, an OUT label file
that already exists).
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_LABEL_FILES = ("calibration.txt",)


def register(commands) -> None:
    parser = commands.add_parser("crops", help="cut labelled page boxes into recognizer lines, as the OCR system does")
    parser.add_argument("pages", type=Path, metavar="PAGES", help="the pages' root (data.path of the detection data)")
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to write crops/ and the label files into")
    parser.add_argument("--label-file", dest="label_files", action="append", metavar="NAME",
                        help="a detection label file, relative to PAGES (or absolute); repeat for several, each "
                             "written under its own name in OUT (default: calibration.txt)")
    parser.add_argument("--width", type=int, default=640, metavar="W",
                        help="the system recognizer's input width: the command counts the crops it squeezes "
                             "(default: 640); the crops are written unresized, for any width")
    parser.add_argument("--height", type=int, default=48, metavar="H",
                        help="the system recognizer's input height (default: 48)")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Write the crops and one recognition label file per detection label file.

    Raises:
        BadPageLabels: a label file or a page cannot be read, a box is not 4 corners, or OUT already holds the
            label file (exit 2).
    """
    from quantgate.ocr.crop_data import BadPageLabels, write_crop_dataset

    if args.width < 1 or args.height < 1:
        raise BadPageLabels(f"--width {args.width} and --height {args.height} must be positive pixel counts")
    for name in args.label_files or DEFAULT_LABEL_FILES:
        summary = write_crop_dataset(args.pages, args.pages / name, args.out, (3, args.height, args.width))
        print(f"wrote {summary.crops} crops of {summary.pages} pages to {summary.label_file} ({summary.skipped} "
              f"unreadable regions skipped; {summary.squeezed} wider than {args.width} at height {args.height}, "
              "squeezed by that recognizer as by the system)")
    return 0
