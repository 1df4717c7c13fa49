"""`train.init_from`: find the weights a run starts from, and refuse bad ones before its version exists.

`release` and `vN` name a version trained here: its train stage's float32 master weights
(weights.npz, pickle-free), read through the store's verified API. A path names a state-dict
file: `.npz` (read without pickle) or `.pdparams` (a pickle, loaded only with
train.init_allow_pickle and never in a run a deployment started: its flow parameters come from
whoever may create flow runs, as with user factories in trust.py).

The flow resolves the source once, before the version is created, and hands the train task a
`WarmStart`: where the bytes are and their sha256. The task reads them again and trains only if
they still hash to that digest, which is also part of the train stage's input digest, so a warm
start is never reused for a cold one (or for one from other weights).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from quantgate.artifacts import RELEASE, ArtifactNotFound, ArtifactStore, InvalidName, StageRef
from quantgate.config import ConfigError, PipelineConfig, TrainConfig
from quantgate.stages.source.outputs import OUTPUTS as SOURCE_OUTPUTS
from quantgate.stages.train.outputs import ARCHITECTURE, NECK, WEIGHTS_FILE
from quantgate.stages.train.outputs import OUTPUTS as TRAIN_OUTPUTS

TRAIN_STAGE = TRAIN_OUTPUTS.stage
IMPORTED_STAGE = SOURCE_OUTPUTS.stage  # what an imported version (trained elsewhere) has instead of "train"
# What the train stage's input digest gets from a warm start.
INIT_DIGEST = "init_weights_sha256"


class WarmStartRefused(ConfigError):
    """train.init_from names weights this run cannot start from (exit 2); nothing was created."""

    def __init__(self, init_from: str, problem: str):
        super().__init__([f"train.init_from={init_from!r}: {problem}"])


@dataclass(frozen=True)
class WarmStart:
    """The weights a run starts from, pinned by the sha256 of their bytes.

    `stage` is the train stage of a version trained here; otherwise `path` is a state-dict file.
    """

    source: str  # "release", "version" or "file"
    sha256: str
    strict: bool
    model: str | None = None
    version: str | None = None
    stage: StageRef | None = None
    path: str | None = None
    allow_pickle: bool = False

    def record(self) -> dict:
        """Where the init weights came from, for the train manifest's `init_from`."""
        return {"source": self.source, "model": self.model, "version": self.version, "path": self.path,
                "sha256": self.sha256, "strict": self.strict,
                "manifest_sha256": self.stage.manifest_sha256 if self.stage is not None else None}

    def described(self) -> str:
        """How messages name these weights."""
        if self.stage is not None:
            return f"train.init_from ({self.source} {self.model}/{self.version}, its {WEIGHTS_FILE})"
        return f"train.init_from file {self.path}"


def resume_conflict(resume: str, init_from: str) -> str:
    """Why --resume and train.init_from cannot both be given."""
    return (f"--resume {resume} continues that version's checkpoint (which already holds the weights its run "
            f"started from), train.init_from={init_from!r} starts a new training from other weights: pick one (to "
            "continue an interrupted warm start, --resume it with train.init_from unset)")


def resolve_warm_start(store: ArtifactStore, config: PipelineConfig, resume: str | None,
                       from_deployment: bool) -> WarmStart | None:
    """The verified source of `config.train.init_from`, or None for a cold start; call before the version exists.

    Raises:
        WarmStartRefused: together with `resume`; no release yet; the version does not exist, did not
            train here (an imported release: fine-tune it where it was trained) or was trained as another
            network; the file is missing, unreadable or not a state dict; a pickle in a deployment run.
        ArtifactCorrupt: the version's train stage no longer matches what was committed.
    """
    train = config.train
    if train.init_from is None:
        return None
    if resume is not None:
        raise WarmStartRefused(train.init_from, resume_conflict(resume, train.init_from))
    if train.init_from == RELEASE:
        version = store.alias(config.model_name, RELEASE)
        if version is None:
            raise WarmStartRefused(train.init_from, (
                f"model {config.model_name!r} has no release yet. Run once without train.init_from (a version "
                "whose gate passes becomes the release), or start from a version such as 'v1'"))
        return _trained_here(store, config.model_name, version, "release", train)
    if train.init_from.startswith("v") and train.init_from[1:].isdigit():  # the schema checked the name
        warm = _trained_here(store, config.model_name, train.init_from, "version", train)
    else:
        warm = _state_dict_file(train, from_deployment)
    if warm.strict and not warm.allow_pickle:  # a pickle is opened only by the train stage, never here
        _check_fit(store, warm, config)
    return warm


def planned_shape(config: PipelineConfig) -> tuple[int, tuple[int, ...]] | None:
    """(classes, input shape) the network will be built for, where the settings alone decide them (the built-in
    digits, text lines with a dictionary, image folders with a fixed size); None where only the data stage knows."""
    from quantgate.stages.source import expected_classes, expected_input

    data = config.data
    if data.dataset == "digits":
        return 10, (1, 8, 8)
    if data.dataset == "digit_strings" and data.character_dict is None:
        return 11, tuple(data.transforms.rec_image_shape)
    if data.dataset == "text_lines" and data.character_dict is None:
        return None  # the dictionary is built from the training labels
    shape = expected_input(data)
    classes, _ = expected_classes(config)
    return (classes, shape) if classes and None not in shape else None


def _check_fit(store: ArtifactStore, warm: WarmStart, config: PipelineConfig) -> None:
    """Refuse, before the version exists, strict init weights that do not fit the network this run builds,
    where the settings decide its shape (otherwise the train stage checks them before its first step)."""
    from quantgate.models.models import build_model
    from quantgate.stages.train import state_fit

    planned = planned_shape(config)
    if planned is None:
        return
    classes, input_shape = planned
    model = build_model(config.train.architecture, classes, input_shape, config.train.neck)
    fit = state_fit(model, read_init_weights(store, warm).arrays)
    if not fit.fits:
        raise WarmStartRefused(config.train.init_from, (
            f"{warm.described()} does not fit {config.train.architecture} for {classes} classes and inputs "
            f"{list(input_shape)}: {'; '.join(fit.problems())}; start from weights of the same network, or set "
            "train.init_strict: false to load the layers that fit and start the others fresh"))


def read_init_weights(store: ArtifactStore, warm: WarmStart):
    """The state dict `warm` names, from bytes that still hash to `warm.sha256`.

    Raises:
        WarmStartMismatch: the bytes changed since the run resolved them, or are not a state dict.
        ArtifactCorrupt: the version's train stage no longer matches what was committed.
    """
    from quantgate.stages.train import InitWeights, WarmStartMismatch, read_state_dict

    data = _weights_bytes(store, warm.stage) if warm.stage is not None else _file_bytes(Path(warm.path), warm.path)
    if hashlib.sha256(data).hexdigest() != warm.sha256:
        raise WarmStartMismatch(f"{warm.described()} changed while the run started (sha256 {warm.sha256[:12]}… "
                                "when checked, other bytes now); keep the file still and run again")
    name = WEIGHTS_FILE if warm.stage is not None else warm.path
    arrays = read_state_dict(data, name, warm.allow_pickle, warm.described())
    return InitWeights(arrays, warm.strict, warm.described())


def _trained_here(store: ArtifactStore, model: str, version: str, source: str, train: TrainConfig) -> WarmStart:
    """The train stage of `version`, verified, and the sha256 of its weights."""
    try:
        ref = store.version(model, version)
    except (ArtifactNotFound, InvalidName) as exc:
        raise WarmStartRefused(train.init_from, f"{exc}") from exc
    named = f"{model}/{version}" + (" (the release)" if source == "release" else "")
    finalized = bool(store.version_record(ref))
    try:
        stage = store.finalized_stage_ref(ref, TRAIN_STAGE) if finalized else store.stage_ref(ref, TRAIN_STAGE)
    except ArtifactNotFound as exc:
        if _has_stage(store, ref, IMPORTED_STAGE):
            raise WarmStartRefused(train.init_from, (
                f"{named} was imported, not trained here: it has no float32 training weights to continue from. "
                "Fine-tune it with the tool that trained it, export it again and import the new export")) from exc
        raise WarmStartRefused(train.init_from, (
            f"{named} has no train stage to start from ({exc}); name a version whose training finished")) from exc
    manifest = store.read_manifest(stage)  # verifies every file of the stage
    trained = manifest["metrics"]
    wanted = {ARCHITECTURE: train.architecture, NECK: train.neck if trained.get(NECK) else None}
    other = {key: (trained.get(key), value) for key, value in wanted.items() if trained.get(key) != value}
    if other and train.init_strict:
        shown = ", ".join(f"train.{key} {was!r} (this run: {now!r})" for key, (was, now) in other.items())
        raise WarmStartRefused(train.init_from, (
            f"{named} was trained with {shown}; start from a version of the same network, or set "
            "train.init_strict: false to load only the layers that fit"))
    recorded = manifest["files"].get(WEIGHTS_FILE, {}).get("sha256")
    if recorded is None:
        raise WarmStartRefused(train.init_from, f"{named}'s train stage holds no {WEIGHTS_FILE}; name a version "
                                                "trained by this quantgate")
    data = _weights_bytes(store, stage)
    digest = hashlib.sha256(data).hexdigest()
    if digest != recorded:  # the file changed between the stage's verification and this read
        raise WarmStartRefused(train.init_from, f"{named}'s {WEIGHTS_FILE} changed while being read; run "
                                                "`quantgate fsck` and try again")
    return WarmStart(source, digest, train.init_strict, model=model, version=version, stage=stage, path=stage.path)


def _has_stage(store: ArtifactStore, ref, stage: str) -> bool:
    try:
        store.stage_ref(ref, stage)
    except ArtifactNotFound:
        return False
    return True


def _weights_bytes(store: ArtifactStore, stage: StageRef) -> bytes:
    # Read once into memory: what is hashed is what is loaded, the file is not opened again.
    return (store.verify_stage(stage) / WEIGHTS_FILE).read_bytes()


def _state_dict_file(train: TrainConfig, from_deployment: bool) -> WarmStart:
    """A state-dict file named by train.init_from: readable, and loadable under this run's trust."""
    from quantgate.stages.train import PICKLE_SUFFIX, WarmStartMismatch, read_state_dict

    path = Path(train.init_from).expanduser().absolute()
    pickle = path.name.endswith(PICKLE_SUFFIX)
    if pickle and from_deployment:
        raise WarmStartRefused(train.init_from, (
            "is a pickle (.pdparams), and a run started from a deployment never loads one, whatever "
            "train.init_allow_pickle says: its parameters come from whoever may create flow runs, and loading a "
            "pickle runs the code its bytes name. Nothing was loaded and no version was created. Convert it to "
            ".npz (numpy.savez of the state dict's arrays), or run it on your own machine with `quantgate run`"))
    data = _file_bytes(path, train.init_from)
    if not pickle:  # an .npz is safe to read now: a bad one fails before the version exists
        try:
            read_state_dict(data, path.name, allow_pickle=False, source=f"train.init_from file {path}")
        except WarmStartMismatch as exc:
            raise WarmStartRefused(train.init_from, str(exc)) from exc
    return WarmStart("file", hashlib.sha256(data).hexdigest(), train.init_strict, path=str(path),
                     allow_pickle=pickle and train.init_allow_pickle)


def _file_bytes(path: Path, init_from: str) -> bytes:
    if not path.is_file():
        raise WarmStartRefused(init_from, f"no such file {path} (a relative path is read from {Path.cwd()}); "
                                          "give the path of a state-dict file, 'release' or a version such as 'v3'")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise WarmStartRefused(init_from, f"cannot read {path} ({exc.strerror or exc})") from exc
