"""Deployment bundles: a passed version's models for each gated runtime, its preprocessing record,
class names, model card and a sealed sha256 manifest, in one folder that runs without the store.

    write_bundle(store, version_ref, out)   writer.py: refuse a version that did not pass, copy, verify, rename
    open_bundle(folder)                     verify.py: re-hash every file against bundle.json before use
    predict_images(bundle, images, ...)     predict.py: preprocess as the data stage did, run, rank classes

`quantgate bundle` and `quantgate predict` are the commands over these (quantgate/cli/).
"""

from quantgate.bundle.predict import BadImage, NotInBundle, Prediction, RankedClass, predict_images
from quantgate.bundle.sources import CannotBundle, NotPassed
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
    "Prediction",
    "RankedClass",
    "VerifiedBundle",
    "open_bundle",
    "predict_images",
    "write_bundle",
]
