"""`quantgate predict BUNDLE IMAGE...`: check a bundle on this machine by classifying images with it (or, for
a text recognizer, reading the text line in each image; for a text detector, finding each page's text boxes;
for an OCR system, reading each page's lines: boxes and text). Without --runtime it runs the runtime that passed
the gate with the lowest latency the run measured at batch 1, among those installed here, and prints one line
saying which and why (quantgate/bundle/latencies.py).

Exit codes: 0 predicted, 2 bad input (a bundle whose files do not match its manifest, an unreadable
image, a runtime the bundle lacks, whose gate did not pass it, or that this machine has not installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from quantgate.cli.shared import add_json_option


def register(commands) -> None:
    parser = commands.add_parser("predict", help="classify images, read text lines, find text boxes or read pages "
                                                 "with a bundle (verified against its manifest first)")
    parser.add_argument("bundle", type=Path, metavar="BUNDLE", help="folder written by `quantgate bundle --out`")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image or page files (PNG, JPEG, BMP)")
    parser.add_argument("--runtime", help="onnxruntime, openvino or paddle_inference (default: of the bundle's "
                                          "runtimes that passed the gate and are installed here, the one whose "
                                          "latency at batch 1 the run measured lowest; predict says which and why)")
    parser.add_argument("--precision", choices=("int8", "fp32"), default="int8",
                        help="which of the bundle's models to run (default: int8, the one the gate released; an "
                             "OCR system runs every component in it)")
    parser.add_argument("--top-k", type=int, default=3, metavar="K",
                        help="classes to show per image (default: 3; text models print every line or box)")
    add_json_option(parser, help="print JSON for scripts")
    parser.add_argument("--verbose", action="store_true", help="show the runtime libraries' own output")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Verify the bundle, pick the runtime unless --runtime names one (and say which and why), predict every image,
    print its top classes (or its decoded text line, its text boxes in reading order, or the lines an OCR system
    read on it).

    Raises:
        BundleInvalid: the bundle is missing, edited, or a file differs from its manifest.
        RuntimeMissing: no runtime is named and none that passed the gate is installed here.
        NotInBundle, BadImage, RuntimeMissing: see quantgate.bundle.predict_images, detect_pages and read_pages.
    """
    from quantgate.bundle import open_bundle
    from quantgate.bundle.latencies import pick_runtime
    from quantgate.bundle.layout import OCR_SYSTEM, TEXT_DETECTION
    from quantgate.bundle.predict import weight_bits_note
    from quantgate.errors import BadInput

    if args.top_k < 1:
        raise BadInput(f"--top-k {args.top_k}: show at least 1 class")
    bundle = open_bundle(args.bundle)
    # Without --runtime, the choice is made (and explained) once, here; the predictors get it by name.
    choice = None if args.runtime else pick_runtime(bundle, args.precision)
    runtime = args.runtime or choice.runtime
    if (note := weight_bits_note(bundle, runtime, args.precision)) is not None:
        print(note, file=sys.stderr)
    show = {TEXT_DETECTION: _boxes, OCR_SYSTEM: _page_lines}.get(bundle.task, _classes_or_lines)
    printed = show(bundle, args, runtime) if args.verbose else _quietly(lambda: show(bundle, args, runtime))
    if args.json:
        print(json.dumps({"model": bundle.manifest["model"], "version": bundle.manifest["version"],
                          "runtime": runtime, "runtime_choice": choice.reason if choice else None,
                          "precision": args.precision, "predictions": printed[0]},
                         indent=2, ensure_ascii=False))
        return 0
    print(f"bundle {bundle.label}: {len(bundle.manifest['files'])} files verified; {runtime} "
          f"{args.precision.upper()} {'system' if bundle.task == OCR_SYSTEM else 'model'}")
    if choice is not None:
        print(choice.reason)
    for line in printed[1]:
        print(line)
    return 0


def _classes_or_lines(bundle, args, runtime):
    """A classifier's top classes, or a recognizer's decoded line, per image: (JSON list, terminal lines)."""
    from quantgate.bundle import predict_images

    predictions = predict_images(bundle, args.images, runtime, args.precision, args.top_k)
    shown = [f"{p.image}: {p.text}" if p.text is not None else
             f"{p.image}: " + "  ".join(f"{c.name} {c.probability:.4f}" for c in p.top) for p in predictions]
    return [_json_prediction(p) for p in predictions], shown


def _boxes(bundle, args, runtime):
    """A text detector's boxes per page, in reading order, one line each: (JSON list, terminal lines)."""
    from quantgate.bundle import detect_pages

    pages = detect_pages(bundle, args.images, runtime, args.precision)
    shown = []
    for page in pages:
        shown += [f"{page.image}: box {number} {_points(box.points)} score {box.score:.4f}"
                  for number, box in enumerate(page.boxes, start=1)] or [f"{page.image}: no text boxes found"]
    return [{"image": page.image, "boxes": [{"points": [list(point) for point in box.points], "score": box.score}
                                            for box in page.boxes]} for page in pages], shown


def _page_lines(bundle, args, runtime):
    """The lines an OCR system read per page, in reading order, one line each: (JSON list, terminal lines)."""
    from quantgate.bundle import read_pages

    pages = read_pages(bundle, args.images, runtime, args.precision)
    shown = []
    for page in pages:
        shown += [f"{page.image}: line {number} {_points(line.points)} score {line.score:.4f} {line.text}"
                  for number, line in enumerate(page.lines, start=1)] or [f"{page.image}: no text read"]
    return [{"image": page.image, "boxes": page.boxes, "dropped": page.dropped,
             "lines": [{"points": [list(point) for point in line.points], "text": line.text, "score": line.score,
                        "flipped": line.flipped} for line in page.lines]} for page in pages], shown


def _points(points) -> str:
    return json.dumps([list(point) for point in points], separators=(",", ":"))


def _json_prediction(prediction) -> dict:
    if prediction.text is not None:
        return {"image": prediction.image, "text": prediction.text}
    return {"image": prediction.image, "top": [{"class": c.name, "index": c.index, "probability": c.probability}
                                               for c in prediction.top]}


def _quietly(work):
    """Run `work` with the runtimes' native output (Paddle's oneDNN passes, glog) kept off the terminal;
    if it breaks, the end of that output is attached to the error as notes."""
    from quantgate.errors import BadInput
    from quantgate.terminal import captured_output, readable

    with tempfile.TemporaryDirectory(prefix="quantgate-predict-") as scratch:
        log = Path(scratch) / "runtime.log"
        try:
            with captured_output(log):
                return work()
        except Exception as exc:
            if isinstance(exc, BadInput):  # its message says what to fix; library chatter would only bury it
                raise
            tail = readable(log.read_text(errors="replace")).strip().splitlines()[-5:] if log.exists() else []
            for line in tail:
                exc.add_note(f"runtime output: {line}")
            raise
