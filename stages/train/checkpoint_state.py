"""Training state at the end of an epoch: written to a folder, read back to continue bit-identically.

A checkpoint folder holds
    model.npz         the model's state dict as it trains (O2: float16 parameters), BatchNorm statistics
    weights.npz       the float32 master weights, as the train stage would ship them
    optimizer.npz     the optimizer state (Adam moments, beta powers, O2 float32 master weights, LR state)
    scaler.npz        GradScaler.state_dict() (scale and its counters; empty when the scaler is disabled)
    rng.npz           Python's `random`, the numpy RandomState that shuffles the batches, Paddle's generators
    steps.csv         the step rows so far, so a resumed run's record covers every step
    state.json        epoch, step, the train settings, the digest of the data stage's record, and the
                      skeletons that put the arrays of each .npz back into Paddle's nested state dicts

No file is a pickle (see state_arrays): a checkpoint is pinned only by hashes anyone with write
access to the store can recompute, so loading one must not be able to run code. The .npz files
are read with allow_pickle=False, from the bytes the store verified (`CheckpointBytes`), never
reopened by path.

Optimizer state is keyed by Paddle's parameter names (`conv2d_0.w_0_moment1_0`), which depend
on how many layers the process built before; it is stored under the model's structured names
(`features.0.weight`) and mapped back to the new model's names on load.
"""

from __future__ import annotations

import csv
import io
import json
import random
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from quantgate.config import TrainConfig
from quantgate.stages.train import amp
from quantgate.stages.train.errors import ResumeMismatch
from quantgate.stages.train.scaler_accounting import STEP_COLUMNS, StepRow
from quantgate.stages.train.state_arrays import flatten, from_npz_bytes, to_npz_bytes, unflatten

STATE_FILE = "state.json"
STEPS_FILE = "steps.csv"
WEIGHTS_FILE = "weights.npz"
# Each part of the state: its .npz, and its skeleton's key in state.json.
PARTS = {"model": "model.npz", "optimizer": "optimizer.npz", "scaler": "scaler.npz", "rng": "rng.npz"}
CHECKPOINT_FILES = frozenset({STATE_FILE, STEPS_FILE, WEIGHTS_FILE, *PARTS.values()})
# 3: pickle-free (.npz + JSON), the data named by StoredData.digest; 2 named them by splits.npz's sha256
# (which no data folder has any more), 1 held paddle.save pickles: neither is loaded.
STATE_FORMAT = 3
# Settings that may differ between the checkpointed run and the one that continues it.
RESUMABLE_CHANGES = ("epochs",)
# Not compared: a checkpoint already holds the weights its run started from, and --resume refuses
# train.init_from (older checkpoints do not record these settings at all).
WARM_START_SETTINGS = ("init_from", "init_allow_pickle", "init_strict")
SEPARATOR = "|"
FRESH_RUN_HINT = "resume from another version's checkpoint or start a fresh run"


@dataclass(frozen=True)
class CheckpointBytes:
    """A checkpoint as the bytes the store verified: file name -> content, read once."""

    name: str
    files: Mapping[str, bytes]


@dataclass(frozen=True)
class ResumePoint:
    epoch: int
    step: int
    rows: list[StepRow]
    numpy_rng_state: tuple
    divergence_streak: int


def _param_names(model: paddle.nn.Layer) -> dict[str, str]:
    """Paddle parameter name -> structured name, longest first so prefixes match the right parameter."""
    names = {param.name: structured for structured, param in model.named_parameters()}
    return dict(sorted(names.items(), key=lambda item: -len(item[0])))


def _portable_optimizer_state(state: dict, model: paddle.nn.Layer) -> dict:
    names = _param_names(model)
    portable = {}
    for key, value in state.items():
        if key == "master_weights":
            portable[key] = {names[name]: tensor for name, tensor in value.items()}
            continue
        owner = next((name for name in names if key == name or key.startswith(name + "_")), None)
        portable[key if owner is None else names[owner] + SEPARATOR + key[len(owner):]] = value
    return portable


def _local_optimizer_state(portable: dict, model: paddle.nn.Layer) -> dict:
    by_structured = {structured: name for name, structured in _param_names(model).items()}
    state = {}
    for key, value in portable.items():
        if key == "master_weights":
            state[key] = {by_structured[structured]: tensor for structured, tensor in value.items()}
            continue
        structured, sep, suffix = key.partition(SEPARATOR)
        state[by_structured[structured] + suffix if sep else key] = value
    return state


def save_training_state(folder: Path, model, optimizer, scaler, numpy_rng: np.random.RandomState, *,
                        config: TrainConfig, data_sha256: str, epoch: int, rows: list[StepRow],
                        divergence_streak: int) -> None:
    """Write everything needed to continue after `epoch` into `folder`: .npz arrays, CSV and JSON only."""
    folder = Path(folder)
    weights, source = amp.float32_state(model, optimizer)
    np.savez(folder / WEIGHTS_FILE, **weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a disabled scaler's state is empty, and Paddle says so
        scaler_state = scaler.state_dict()
    trees = {
        # use_hook=False: O2's save_dtype hook would cast float16 parameters to float32, and
        # set_state_dict refuses a dtype that differs from the parameter's on load
        "model": dict(model.state_dict(use_hook=False)),
        "optimizer": _portable_optimizer_state(optimizer.state_dict(), model),
        "scaler": scaler_state,
        "rng": {"python": random.getstate(), "numpy": numpy_rng.get_state(), "paddle": paddle.get_rng_state()},
    }
    skeletons = {}
    for part, file_name in PARTS.items():
        arrays: dict[str, np.ndarray] = {}
        skeletons[part] = flatten(trees[part], arrays)
        (folder / file_name).write_bytes(to_npz_bytes(arrays))
    with open(folder / STEPS_FILE, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        writer.writerows(row.as_tuple() for row in rows)
    state = {
        "format": STATE_FORMAT,
        "epoch": epoch,
        "step": rows[-1].step if rows else 0,
        "train_config": config.model_dump(mode="json"),
        "data_sha256": data_sha256,
        "divergence_streak": divergence_streak,
        "weights_source": source,
        "scaler_enabled": bool(scaler.is_enable()),
        "skeletons": skeletons,
    }
    (folder / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))


def read_state(saved: CheckpointBytes) -> dict:
    """The checkpoint's state.json (plain JSON, safe to read before deciding to resume).

    Raises:
        ResumeMismatch: the checkpoint is not one this quantgate writes (an older, pickle-based
            format, other files, or a state.json without the expected fields).
    """
    where = f"checkpoint {saved.name}"
    if set(saved.files) != CHECKPOINT_FILES:
        raise ResumeMismatch(
            f"{where} holds {sorted(saved.files)}, not the pickle-free files {sorted(CHECKPOINT_FILES)} this "
            f"quantgate writes (older checkpoints held pickles and are never loaded); {FRESH_RUN_HINT}"
        )
    try:
        state = json.loads(saved.files[STATE_FILE])
        fields_ok = (state["format"] == STATE_FORMAT and isinstance(state["train_config"], dict)
                     and isinstance(state["epoch"], int) and isinstance(state["data_sha256"], str)
                     and isinstance(state["skeletons"], dict))
    except (ValueError, KeyError, TypeError) as exc:
        raise ResumeMismatch(f"{where}: its {STATE_FILE} is unreadable ({exc}); {FRESH_RUN_HINT}") from exc
    if not fields_ok:
        raise ResumeMismatch(f"{where}: its {STATE_FILE} is not format {STATE_FORMAT} with the expected fields; "
                             f"{FRESH_RUN_HINT}")
    return state


def resume_problems(state: dict, config: TrainConfig) -> list[str]:
    """Why this checkpoint cannot continue a run with `config`; empty when it can."""
    saved = state["train_config"]
    wanted = config.model_dump(mode="json")
    problems = [
        f"train.{key}: the checkpoint was trained with {saved.get(key)!r}, this run asks for {wanted[key]!r}; "
        f"resume with the checkpoint's value (only {', '.join(RESUMABLE_CHANGES)} may change)"
        for key in sorted(wanted)
        if key not in RESUMABLE_CHANGES + WARM_START_SETTINGS and saved.get(key) != wanted[key]
    ]
    if state["epoch"] >= config.epochs:
        problems.append(
            f"train.epochs: the checkpoint already holds {state['epoch']} epochs and this run asks for "
            f"{config.epochs}; raise train.epochs above {state['epoch']} to train further"
        )
    return problems


def load_training_state(saved: CheckpointBytes, model, optimizer, scaler, *, config: TrainConfig,
                        data_sha256: str) -> ResumePoint:
    """Restore model, optimizer, scaler and RNG from a verified checkpoint's bytes.

    Raises:
        ResumeMismatch: the checkpoint was made with other settings or other training data,
            already holds every epoch asked for, or is not a checkpoint this quantgate writes.
    """
    state = read_state(saved)
    problems = resume_problems(state, config)
    if state["data_sha256"] != data_sha256:
        problems.append(
            f"the training data differ from the checkpoint's (data digest {data_sha256[:12]}... vs "
            f"{state['data_sha256'][:12]}...); resume with the same data settings and image files"
        )
    if problems:
        raise ResumeMismatch(f"cannot resume from checkpoint {saved.name}: " + "; ".join(problems))
    trees = {part: _read_part(saved, state, part) for part in PARTS}
    _check_model_state(trees["model"], model, saved.name)
    try:
        model.set_state_dict(trees["model"])
        optimizer.set_state_dict(_local_optimizer_state(trees["optimizer"], model))
        if trees["scaler"] and scaler.is_enable():
            scaler.load_state_dict({key: (np.asarray(value) if key == "scale" else value)
                                    for key, value in trees["scaler"].items()})
        rng = trees["rng"]
        random.setstate(rng["python"])
        paddle.set_rng_state(rng["paddle"])
        rows = [StepRow.from_csv(row) for row in csv.DictReader(io.StringIO(saved.files[STEPS_FILE].decode()))]
        return ResumePoint(state["epoch"], state["step"], rows, rng["numpy"], state["divergence_streak"])
    except (KeyError, TypeError, ValueError, AssertionError) as exc:  # Paddle asserts on mismatched state
        raise ResumeMismatch(f"cannot resume from checkpoint {saved.name}: its state does not fit this model "
                             f"and optimizer ({type(exc).__name__}: {exc}); {FRESH_RUN_HINT}") from exc


def _read_part(saved: CheckpointBytes, state: dict, part: str) -> object:
    """One part's nested state, from its .npz bytes (allow_pickle=False) and its skeleton in state.json."""
    try:
        return unflatten(state["skeletons"][part], from_npz_bytes(saved.files[PARTS[part]]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ResumeMismatch(f"cannot resume from checkpoint {saved.name}: its {PARTS[part]} does not match "
                             f"its {STATE_FILE} ({type(exc).__name__}: {exc}); {FRESH_RUN_HINT}") from exc


def _check_model_state(loaded: object, model: paddle.nn.Layer, name: str) -> None:
    """Refuse a model state that set_state_dict would load only in part (it merely warns)."""
    expected = {key: (list(value.shape), value.dtype) for key, value in model.state_dict(use_hook=False).items()}
    got = ({key: (list(value.shape), value.dtype) for key, value in loaded.items()
            if isinstance(value, paddle.Tensor)} if isinstance(loaded, dict) else {})
    if got != expected:
        differ = sorted(key for key in set(expected) | set(got) if expected.get(key) != got.get(key))
        raise ResumeMismatch(f"cannot resume from checkpoint {name}: its model state differs from this model's "
                             f"in {differ[:5]}{'…' if len(differ) > 5 else ''}; {FRESH_RUN_HINT}")
