"""Training state without pickle: nested dicts, lists and tuples of tensors, arrays and scalars as
`.npz` arrays plus a JSON skeleton.

Paddle's own `paddle.save` (and `pickle` for RNG states) would make a checkpoint a pickle, and
loading a pickle runs whatever code its bytes name. A checkpoint is pinned only by hashes that a
forger can recompute, so it must hold nothing that can execute: arrays go into an `.npz` read
with allow_pickle=False, and everything else (the structure, Python scalars, tensor dtypes) into
JSON. Every skeleton node is a JSON scalar or a dict with a "kind", so no user key can be
mistaken for structure.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Mapping

import numpy as np
import paddle

GeneratorState = paddle.base.libpaddle.GeneratorState
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def flatten(tree: object, arrays: dict[str, np.ndarray]) -> object:
    """The JSON skeleton of `tree`; its tensors and arrays are added to `arrays` under fresh keys.

    Raises:
        TypeError: `tree` holds something other than tensors, arrays, Paddle generator states,
            str-keyed dicts, lists, tuples, bools, ints, floats, strings and None.
    """
    if tree is None or isinstance(tree, (bool, int, str)):
        return tree
    if isinstance(tree, float):
        if math.isfinite(tree):
            return tree
        return {"kind": "float", "value": "nan" if math.isnan(tree) else ("inf" if tree > 0 else "-inf")}
    if isinstance(tree, paddle.Tensor):
        # bfloat16 tensors come out as uint16 arrays; the dtype name says how to read them back
        return {"kind": "tensor", "key": _add(arrays, tree.numpy()), "dtype": _dtype_name(tree.dtype)}
    if isinstance(tree, (np.ndarray, np.generic)):
        kind = "ndarray" if isinstance(tree, np.ndarray) else "npscalar"
        return {"kind": kind, "key": _add(arrays, np.asarray(tree))}
    if isinstance(tree, GeneratorState):
        # (device, seed, offset, engine): its pybind pickle state, the engine being the bytes of
        # the Mersenne Twister's text form; restored through the same __setstate__
        device, seed, offset, engine = tree.__getstate__()
        return {"kind": "paddle_generator", "device": device, "seed": seed, "offset": offset,
                "engine": _add(arrays, np.asarray(engine, dtype=np.uint8))}
    if isinstance(tree, Mapping):
        bad = [key for key in tree if not isinstance(key, str)]
        if bad:
            raise TypeError(f"cannot store dict keys {bad!r} in a checkpoint: keys must be strings")
        return {"kind": "dict", "items": {key: flatten(value, arrays) for key, value in tree.items()}}
    if isinstance(tree, (list, tuple)):
        return {"kind": type(tree).__name__, "items": [flatten(item, arrays) for item in tree]}
    raise TypeError(f"cannot store a {type(tree).__name__} in a checkpoint without pickle")


def unflatten(node: object, arrays: Mapping[str, np.ndarray]) -> object:
    """The tree `flatten` described by `node`, with its arrays taken from `arrays`.

    Raises:
        ValueError, KeyError, TypeError: `node` is not a skeleton `flatten` writes, or names an array
            that `arrays` lacks or that has another dtype than recorded.
    """
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict):
        raise TypeError(f"a {type(node).__name__} is not a checkpoint skeleton node")
    kind = node["kind"]
    if kind == "float":
        return _NON_FINITE[node["value"]]
    if kind == "dict":
        return {key: unflatten(value, arrays) for key, value in node["items"].items()}
    if kind in ("list", "tuple"):
        items = [unflatten(item, arrays) for item in node["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "tensor":
        return _tensor(arrays[node["key"]], node["dtype"])
    if kind == "ndarray":
        return arrays[node["key"]]
    if kind == "npscalar":
        return arrays[node["key"]][()]
    if kind == "paddle_generator":
        state = GeneratorState.__new__(GeneratorState)
        engine = arrays[node["engine"]]
        if engine.dtype != np.uint8 or engine.ndim != 1:
            raise ValueError("a Paddle generator's engine must be a 1-D uint8 array")
        state.__setstate__((int(node["device"]), int(node["seed"]), int(node["offset"]), engine.tolist()))
        return state
    raise ValueError(f"unknown checkpoint skeleton kind {kind!r}")


def to_npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An uncompressed `.npz` of `arrays` (np.savez's format)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def from_npz_bytes(data: bytes) -> dict[str, np.ndarray]:
    """Every array of an `.npz` held in memory, read with allow_pickle=False.

    Raises:
        ValueError: the bytes are not an .npz, or an array would need pickle (object dtype).
    """
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            if not isinstance(stored, np.lib.npyio.NpzFile):
                raise ValueError("not an .npz archive")
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, EOFError, zipfile.BadZipFile) as exc:  # "not a numpy file", damaged or truncated zips
        raise ValueError(f"not a readable .npz archive ({exc})") from exc
    raw = sorted(name for name, value in arrays.items() if not isinstance(value, np.ndarray))
    if raw:  # NpzFile returns the bytes of a member that is not a .npy file
        raise ValueError(f"the .npz members {raw} are not numpy arrays")
    return arrays


def _add(arrays: dict[str, np.ndarray], array: np.ndarray) -> str:
    if array.dtype.hasobject:
        raise TypeError("cannot store an object array in a checkpoint without pickle")
    key = f"a{len(arrays)}"
    arrays[key] = array
    return key


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("paddle.")


def _tensor(array: np.ndarray, dtype: str) -> paddle.Tensor:
    """A tensor of the recorded `dtype` holding `array` bit for bit."""
    if dtype == "bfloat16" and array.dtype == np.uint16:
        # numpy has no bfloat16: Paddle hands its bits out as uint16 and takes them back the same way
        tensor = paddle.to_tensor(array, dtype="bfloat16")
    else:
        tensor = paddle.to_tensor(array)
    if _dtype_name(tensor.dtype) != dtype:
        raise ValueError(f"an array recorded as {dtype} holds {array.dtype}")
    return tensor
