"""One digest of a set of named numpy arrays, for the places that compare arrays by content."""

from __future__ import annotations

import hashlib

import numpy as np


def arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over every array's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
