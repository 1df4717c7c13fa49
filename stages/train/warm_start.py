"""Warm starts (train.init_from): a state dict read from bytes, matched key by key against the model to train.

An `.npz` is read with allow_pickle=False, so its bytes cannot run code. A `.pdparams` file is a
pickle (paddle.save): loading it runs whatever its bytes name, so it is read only when the caller
says the user allowed it (train.init_allow_pickle) and the run is not one a deployment started.

The model is built and seeded exactly as for a cold start, then the init weights replace its
state: every key strictly (the default), or with `strict` off only the keys that fit, so a new
head keeps its fresh initialisation, which is then the same as a cold run's with that seed.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import paddle

from quantgate.models.models import load_weights
from quantgate.stages.train.errors import WarmStartMismatch
from quantgate.stages.train.state_arrays import from_npz_bytes

NPZ_SUFFIX = ".npz"
PICKLE_SUFFIX = ".pdparams"
# paddle.save adds this bookkeeping entry (Paddle's parameter names) to some state dicts; it holds no weights.
PADDLE_NAME_TABLE = "StructuredToParameterName@@"
LISTED = 10  # keys named per kind of problem in a message; the manifest lists them all


@dataclass(frozen=True)
class InitWeights:
    """The state dict a run starts from: name -> array, and how to match it against the model."""

    arrays: Mapping[str, np.ndarray]
    strict: bool
    source: str  # how messages name it, e.g. "train.init_from='release' (digits-cnn v3)"


@dataclass(frozen=True)
class StateFit:
    """How a state dict's keys and shapes compare with a model's."""

    missing: list[str]  # the model has them, the state dict does not
    unexpected: list[str]  # the state dict has them, the model does not
    reshaped: dict[str, tuple[list[int], list[int]]]  # name -> (the model's shape, the state dict's)

    @property
    def fits(self) -> bool:
        return not (self.missing or self.unexpected or self.reshaped)

    def problems(self) -> list[str]:
        parts = []
        for kind, keys in (("missing", self.missing), ("unexpected", self.unexpected)):
            if keys:
                parts.append(f"{len(keys)} {kind} key(s): {_listed(keys)}")
        if self.reshaped:
            shapes = [f"{name} (model {model}, given {given})"
                      for name, (model, given) in sorted(self.reshaped.items())]
            parts.append(f"{len(shapes)} mis-shaped key(s): {_listed(shapes)}")
        return parts


def read_state_dict(data: bytes, file_name: str, allow_pickle: bool, source: str) -> dict[str, np.ndarray]:
    """The name -> array state dict held in `data`, the bytes of a `.npz` or (with `allow_pickle`) `.pdparams`.

    Raises:
        WarmStartMismatch: the bytes are not such a file, hold something other than numeric arrays under
            string keys, or are a pickle and `allow_pickle` is False.
    """
    if file_name.endswith(NPZ_SUFFIX):
        if not zipfile.is_zipfile(io.BytesIO(data)):  # np.load would take other bytes for a pickle, and refuse
            raise WarmStartMismatch(f"{source} is not an .npz archive (a zip of .npy arrays); write the state "
                                    "dict with numpy.savez(path, **arrays)")
        try:
            arrays = from_npz_bytes(data)
        except ValueError as exc:
            raise WarmStartMismatch(f"{source}: {exc}; write the state dict with numpy.savez(path, **arrays)") from exc
    elif file_name.endswith(PICKLE_SUFFIX):
        if not allow_pickle:
            raise WarmStartMismatch(f"{source} is a pickle (.pdparams) and train.init_allow_pickle is false: loading "
                                    "it would run whatever code its bytes name; convert it to .npz, or allow it")
        arrays = _unpickled_state_dict(data, source)
    else:
        raise WarmStartMismatch(f"{source}: {file_name!r} is neither {NPZ_SUFFIX} nor {PICKLE_SUFFIX}")
    if not arrays:
        raise WarmStartMismatch(f"{source} holds no arrays; it is not a model's state dict")
    odd = sorted(name for name, array in arrays.items() if array.dtype.kind not in "fiub")
    if odd:
        raise WarmStartMismatch(f"{source} holds non-numeric arrays {_listed(odd)}; a state dict holds numbers only")
    return arrays


def _unpickled_state_dict(data: bytes, source: str) -> dict[str, np.ndarray]:
    """paddle.load of a `.pdparams`' bytes (this runs the pickle), as numpy arrays."""
    try:
        loaded = paddle.load(io.BytesIO(data), return_numpy=True)
    except Exception as exc:  # a pickle can fail in any way its bytes choose
        raise WarmStartMismatch(f"{source} could not be loaded with paddle.load ({type(exc).__name__}: {exc}); "
                                "save it with paddle.save(model.state_dict(), path)") from exc
    if not isinstance(loaded, dict):
        raise WarmStartMismatch(f"{source} holds a {type(loaded).__name__}, not a state dict; "
                                "save it with paddle.save(model.state_dict(), path)")
    loaded = {name: value for name, value in loaded.items() if name != PADDLE_NAME_TABLE}
    odd = sorted(str(name) for name, value in loaded.items()
                 if not isinstance(name, str) or not isinstance(value, np.ndarray))
    if odd:
        raise WarmStartMismatch(f"{source} holds entries that are not named arrays: {_listed(odd)}; "
                                "save the model's state dict itself, not a checkpoint holding it")
    return loaded


def state_fit(model: paddle.nn.Layer, arrays: Mapping[str, np.ndarray]) -> StateFit:
    """Compare `arrays` with `model`'s state dict (parameters and buffers such as BatchNorm statistics)."""
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    given = {name: list(array.shape) for name, array in arrays.items()}
    shared = sorted(set(expected) & set(given))
    return StateFit(
        missing=sorted(set(expected) - set(given)),
        unexpected=sorted(set(given) - set(expected)),
        reshaped={name: (expected[name], given[name]) for name in shared if expected[name] != given[name]},
    )


def start_from(model: paddle.nn.Layer, init: InitWeights, architecture: str) -> dict:
    """Load `init` into the freshly built `model` (left in training mode); return what was loaded, for the manifest.

    Strict: every key must fit. Otherwise the keys that fit are loaded and the others keep the model's
    fresh values (`fresh_keys`); keys of the state dict the model lacks are left out (`unused_keys`).

    Raises:
        WarmStartMismatch: strict and a key is missing, unexpected or mis-shaped (each listed, with both
            shapes), or no key fits at all.
    """
    fit = state_fit(model, init.arrays)
    if init.strict and not fit.fits:
        raise WarmStartMismatch(
            f"{init.source} does not fit train.architecture={architecture!r} as built for this data: "
            + "; ".join(fit.problems()) + ". Start from weights of the same network and data (classes, image "
            "size), or set train.init_strict: false to let the layers that do not fit start fresh"
        )
    own = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    usable = {name: np.asarray(array).astype(own[name].dtype, copy=False) for name, array in init.arrays.items()
              if name in own and name not in fit.reshaped}
    if not usable:
        raise WarmStartMismatch(
            f"{init.source}: none of its {len(init.arrays)} key(s) fits train.architecture={architecture!r} "
            f"({'; '.join(fit.problems())}); it was saved from another network: leave train.init_from unset"
        )
    load_weights(model, {**own, **usable}, architecture)  # the one way weights are set; it checks names and shapes
    model.train()
    return {"strict": init.strict, "fresh_keys": sorted([*fit.missing, *fit.reshaped]), "unused_keys": fit.unexpected,
            "loaded_keys": len(usable)}


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f", … ({len(names) - LISTED} more)" if len(names) > LISTED else "")
