"""`quantgate predict BUNDLE IMAGE...`: check a bundle on this machine by classifying images with it (or, for
a text recognizer, reading the text line in each image).

Exit codes: 0 predicted, 2 bad input (a bundle whose files do not match its manifest, an unreadable
image, a runtime the bundle lacks or this machine has not installed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from quantgate.cli.shared import add_json_option


def register(commands) -> None:
    parser = commands.add_parser("predict", help="classify images, or read text lines, with a bundle (verified "
                                                 "against its manifest first)")
    parser.add_argument("bundle", type=Path, metavar="BUNDLE", help="folder written by `quantgate bundle --out`")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, BMP)")
    parser.add_argument("--runtime", help="onnxruntime, openvino or paddle_inference (default: the bundle's default, "
                                          "onnxruntime when it holds it)")
    parser.add_argument("--precision", choices=("int8", "fp32"), default="int8",
                        help="which of the bundle's models to run (default: int8, the one the gate released)")
    parser.add_argument("--top-k", type=int, default=3, metavar="K",
                        help="classes to show per image (default: 3; a text recognizer prints its decoded line)")
    add_json_option(parser, help="print JSON for scripts")
    parser.add_argument("--verbose", action="store_true", help="show the runtime libraries' own output")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Verify the bundle, predict every image, print its top classes (or its decoded text line).

    Raises:
        BundleInvalid: the bundle is missing, edited, or a file differs from its manifest.
        NotInBundle, BadImage, RuntimeMissing: see quantgate.bundle.predict_images.
    """
    from quantgate.bundle import open_bundle, predict_images
    from quantgate.errors import BadInput

    if args.top_k < 1:
        raise BadInput(f"--top-k {args.top_k}: show at least 1 class")
    bundle = open_bundle(args.bundle)
    runtime = args.runtime or bundle.manifest["default_runtime"]
    if args.verbose:
        predictions = predict_images(bundle, args.images, runtime, args.precision, args.top_k)
    else:
        predictions = _quietly(lambda: predict_images(bundle, args.images, runtime, args.precision, args.top_k))
    if args.json:
        print(json.dumps({"model": bundle.manifest["model"], "version": bundle.manifest["version"],
                          "runtime": runtime, "precision": args.precision,
                          "predictions": [_json_prediction(p) for p in predictions]}, indent=2, ensure_ascii=False))
        return 0
    print(f"bundle {bundle.label}: {len(bundle.manifest['files'])} files verified; {runtime} "
          f"{args.precision.upper()} model")
    for prediction in predictions:
        if prediction.text is not None:
            print(f"{prediction.image}: {prediction.text}")
            continue
        ranked = "  ".join(f"{c.name} {c.probability:.4f}" for c in prediction.top)
        print(f"{prediction.image}: {ranked}")
    return 0


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
