"""Deployment bundles: a passed version's models for each gated runtime, its preprocessing record,
class names, model card and a sealed sha256 manifest, in one folder that runs without the store.

    write_bundle(store, version_ref, out)   writer.py: refuse a version that did not pass, copy, verify, rename
    open_bundle(folder)                     verify.py: re-hash every file against bundle.json before use
    pick_runtime(bundle)                    latencies.py: the fastest runtime that passed the gate and is installed here,
                                            by the latencies the run recorded, and why
    predict_images(bundle, images, ...)     predict.py: preprocess as the data stage did, run, rank classes (or
                                            decode a text line)
    detect_pages(bundle, pages, ...)        pages.py: a text detector's boxes per page, in reading order
    read_pages(bundle, pages, ...)          system_predict.py: an OCR system's lines per page (boxes and text)

`quantgate bundle` and `quantgate predict` are the commands over these (quantgate/cli/).
"""

from quantgate.bundle.pages import PageBoxes, TextBox, detect_pages
from quantgate.bundle.predict import BadImage, NotInBundle, Prediction, RankedClass, predict_images
from quantgate.bundle.sources import CannotBundle, NotPassed
from quantgate.bundle.system_predict import PageText, ReadLine, read_pages
from quantgate.bundle.verify import BundleInvalid, VerifiedBundle, open_bundle
from quantgate.bundle.writer import BundleResult, OutputExists, write_bundle

__all__ = [
    "BadImage",
    "BundleInvalid",
    "BundleResult",
    "CannotBundle",
    "NotInBundle",
    "NotPassed",
    "OutputExists",
    "PageBoxes",
    "PageText",
    "Prediction",
    "RankedClass",
    "ReadLine",
    "TextBox",
    "VerifiedBundle",
    "detect_pages",
    "open_bundle",
    "predict_images",
    "read_pages",
    "write_bundle",
]
