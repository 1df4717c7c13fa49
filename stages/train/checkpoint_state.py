"""Training state at the end of an epoch: written to a folder, read back to continue bit-identically.

A checkpoint folder holds
    model.pdparams    the model's state dict as it trains (O2: float16 parameters), BatchNorm statistics
    weights.npz       the float32 master weights, as the train stage would ship them
    optimizer.pdopt   the optimizer state (Adam moments, beta powers, O2 float32 master weights)
    scaler.pdscaler   GradScaler.state_dict() (scale and its counters; empty when the scaler is disabled)
    rng.pkl           Paddle's generator states and the numpy RandomState that shuffles the batches
    steps.csv         the step rows so far, so a resumed run's record covers every step
    state.json        epoch, step, the train settings and the sha256 of the training data

Optimizer state is keyed by Paddle's parameter names (`conv2d_0.w_0_moment1_0`), which depend
on how many layers the process built before; it is stored under the model's structured names
(`features.0.weight`) and mapped back to the new model's names on load.

The .pdparams/.pdopt/.pkl files are pickles: callers must verify their sha256 (the artifact
store's `verify_checkpoint`) before `load_training_state` reads them.
"""

from __future__ import annotations

import csv
import hashlib
import json
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from quantgate.config import TrainConfig
from quantgate.stages.train import amp
from quantgate.stages.train.errors import ResumeMismatch
from quantgate.stages.train.scaler_accounting import STEP_COLUMNS, StepRow

STATE_FILE = "state.json"
# Settings that may differ between the checkpointed run and the one that continues it.
RESUMABLE_CHANGES = ("epochs",)
SEPARATOR = "|"


@dataclass(frozen=True)
class ResumePoint:
    epoch: int
    step: int
    rows: list[StepRow]
    numpy_rng_state: tuple
    divergence_streak: int


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
                        config: TrainConfig, splits_sha256: str, epoch: int, rows: list[StepRow],
                        divergence_streak: int) -> None:
    """Write everything needed to continue after `epoch` into `folder`."""
    folder = Path(folder)
    # use_hook=False: O2's save_dtype hook would cast float16 parameters to float32, and
    # set_state_dict refuses a dtype that differs from the parameter's on load
    paddle.save(model.state_dict(use_hook=False), str(folder / "model.pdparams"))
    weights, source = amp.float32_state(model, optimizer)
    np.savez(folder / "weights.npz", **weights)
    paddle.save(_portable_optimizer_state(optimizer.state_dict(), model), str(folder / "optimizer.pdopt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a disabled scaler's state is empty, and Paddle says so
        paddle.save(scaler.state_dict(), str(folder / "scaler.pdscaler"))
    with open(folder / "rng.pkl", "wb") as handle:
        pickle.dump({"paddle": paddle.get_rng_state(), "numpy": numpy_rng.get_state()}, handle)
    with open(folder / "steps.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_COLUMNS)
        writer.writerows(row.as_tuple() for row in rows)
    state = {
        "epoch": epoch,
        "step": rows[-1].step if rows else 0,
        "train_config": config.model_dump(mode="json"),
        "splits_sha256": splits_sha256,
        "divergence_streak": divergence_streak,
        "weights_source": source,
        "scaler_enabled": bool(scaler.is_enable()),
    }
    (folder / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))


def read_state(folder: Path) -> dict:
    """The checkpoint's state.json (plain JSON, safe to read before deciding to resume)."""
    return json.loads((Path(folder) / STATE_FILE).read_text())


def resume_problems(state: dict, config: TrainConfig) -> list[str]:
    """Why this checkpoint cannot continue a run with `config`; empty when it can."""
    saved = state["train_config"]
    wanted = config.model_dump(mode="json")
    problems = [
        f"train.{key}: the checkpoint was trained with {saved.get(key)!r}, this run asks for {wanted[key]!r}; "
        f"resume with the checkpoint's value (only {', '.join(RESUMABLE_CHANGES)} may change)"
        for key in sorted(wanted) if key not in RESUMABLE_CHANGES and saved.get(key) != wanted[key]
    ]
    if state["epoch"] >= config.epochs:
        problems.append(
            f"train.epochs: the checkpoint already holds {state['epoch']} epochs and this run asks for "
            f"{config.epochs}; raise train.epochs above {state['epoch']} to train further"
        )
    return problems


def load_training_state(folder: Path, model, optimizer, scaler, *, config: TrainConfig,
                        splits_sha256: str) -> ResumePoint:
    """Restore model, optimizer, scaler and RNG from a verified checkpoint folder.

    Raises:
        ResumeMismatch: the checkpoint was made with other settings or other training data,
            or already holds every epoch asked for.
    """
    folder = Path(folder)
    state = read_state(folder)
    problems = resume_problems(state, config)
    if state["splits_sha256"] != splits_sha256:
        problems.append(
            f"the training data differ from the checkpoint's (splits sha256 {splits_sha256[:12]}... vs "
            f"{state['splits_sha256'][:12]}...); resume with the same data settings"
        )
    if problems:
        raise ResumeMismatch(f"cannot resume from checkpoint {folder.name}: " + "; ".join(problems))
    model.set_state_dict(paddle.load(str(folder / "model.pdparams")))
    optimizer.set_state_dict(_local_optimizer_state(paddle.load(str(folder / "optimizer.pdopt")), model))
    scaler_state = paddle.load(str(folder / "scaler.pdscaler"))
    if scaler_state and scaler.is_enable():
        scaler.load_state_dict({key: (np.asarray(value) if key == "scale" else value)
                                for key, value in scaler_state.items()})
    with open(folder / "rng.pkl", "rb") as handle:
        rng = pickle.load(handle)
    paddle.set_rng_state(rng["paddle"])
    with open(folder / "steps.csv", newline="") as handle:
        rows = [StepRow.from_csv(row) for row in csv.DictReader(handle)]
    return ResumePoint(state["epoch"], state["step"], rows, rng["numpy"], state["divergence_streak"])
