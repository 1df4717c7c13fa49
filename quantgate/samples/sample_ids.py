"""Which raw sample each row of a split is, by content, so two versions' splits can be compared.

A sample's id names what it is, whatever split or version it lands in: an image or line file by its
sha256 (the file table's), a built-in digit by its index into scikit-learn's load_digits, a built-in
digit string by the sha256 of its pixels and text. Its sources are the raw items it is made of: the
file itself, the digit, or each digit a digit string was composed from. A sample is "seen" by a version
when one of its sources is in that version's train, calibration or validation split.
"""

from __future__ import annotations

import hashlib

import numpy as np

from quantgate.samples.reading import StoredData

SEEN_SPLITS = ("train", "calibration", "validation")  # what a model was fitted, calibrated or searched on
DIGIT_STRINGS = "digit_strings"


def sample_ids(data: StoredData, split: str) -> np.ndarray:
    """One id per row of `split`, in order, as a numpy unicode array (loads with allow_pickle=False)."""
    if data.on_disk:
        ids = [f"sha256:{row.sha256}" for row in data.rows[split]]
    elif data.spec.get("dataset") == DIGIT_STRINGS:
        pixels, texts = data.arrays[f"x_{split}"], data.arrays[f"text_{split}"]
        ids = [f"{DIGIT_STRINGS}:" + hashlib.sha256(np.ascontiguousarray(image).tobytes() + str(text).encode())
               .hexdigest() for image, text in zip(pixels, texts)]
    else:
        ids = [f"{data.spec['dataset']}[{int(index)}]" for index in data.arrays[f"index_{split}"]]
    return np.asarray(ids, dtype=str) if ids else np.zeros(0, dtype="<U1")


def sample_sources(data: StoredData, split: str) -> list[frozenset[str]]:
    """The raw items each row of `split` is made of (see the module docstring)."""
    if data.on_disk:
        return [frozenset({f"sha256:{row.sha256}"}) for row in data.rows[split]]
    if data.spec.get("dataset") == DIGIT_STRINGS:
        return [frozenset(f"digits[{int(source)}]" for source in line if source >= 0)
                for line in data.arrays[f"sources_{split}"]]
    return [frozenset({str(sample)}) for sample in sample_ids(data, split)]


def seen_sources(data: StoredData) -> set[str]:
    """Every raw item of `data`'s train, calibration and validation splits."""
    seen: set[str] = set()
    for split in SEEN_SPLITS:
        for sources in sample_sources(data, split):
            seen |= sources
    return seen
