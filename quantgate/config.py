"""The one configuration schema, shared by the CLI, YAML files and Prefect deployment parameters.

Every field has a default and a one-line description; unknown keys are errors, so a typo
never silently falls back to a default. `load_config` turns pydantic's validation errors
into one `ConfigError` that lists every bad field with its value and what is allowed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from quantgate.config_base import Section
from quantgate.data_config import (  # noqa: F401  (one schema: the data section is re-exported)
    BOX_DATASETS,
    FILE_DATASETS,
    TEXT_DATASETS,
    AugmentConfig,
    DataConfig,
    DigitStringsConfig,
    TransformsConfig,
)
from quantgate.errors import BadInput, clipped
from quantgate.evaluate_config import (  # noqa: F401  (one schema: the evaluate section is re-exported)
    EvaluateConfig,
    latency_batch_origin,
    task_latency_batch,
)
from quantgate.gate_config import GatePolicy, RuntimeName  # noqa: F401  (one schema: re-exported)
from quantgate.quantize_config import (  # noqa: F401  (one schema: the quantize and convert sections are re-exported)
    ALGOS,
    DEFAULT_RECIPES,
    ROUNDINGS,
    WEIGHT_QUANTIZE_TYPES,
    ConvertConfig,
    QuantizeConfig,
    QuantizeRecipe,
    SearchConfig,
)
from quantgate.system_config import SystemConfig

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# A paddle.vision.models / built-in name (resnet18), or a user network's `package.module:factory`.
ARCHITECTURE_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:)?[A-Za-z_][A-Za-z0-9_]*$"


# A hostile or mistaken config must not turn an error into megabytes of terminal or Prefect log: a
# message echoes at most ECHO_LIMIT characters of a value and lists PROBLEMS_LISTED problems; a file or
# --set value may expand (YAML aliases included) to MAX_CONFIG_VALUES values; the schema has a few hundred.
ECHO_LIMIT, PROBLEMS_LISTED, MAX_CONFIG_VALUES = 200, 50, 10_000


def cut(text: str, limit: int = 5 * ECHO_LIMIT) -> str:
    """A message part (a problem line, a parser's error) cut to `limit` characters."""
    return clipped(text, limit)


def shown_value(value: Any) -> str:
    """`repr(value)` for an error message, cut to ECHO_LIMIT characters."""
    return cut(repr(value), ECHO_LIMIT)


class ConfigError(BadInput, ValueError):
    """The configuration is invalid; `problems` lists every bad field, not just the first."""

    def __init__(self, problems: list[str]):
        self.problems = [cut(str(problem)) for problem in problems]
        listed = self.problems[:PROBLEMS_LISTED]
        more = len(self.problems) - len(listed)
        lines = "\n".join(f"  - {problem}" for problem in listed) + (f"\n  - ... and {more} more" if more else "")
        super().__init__(f"invalid configuration ({len(self.problems)} problem(s)):\n{lines}")


class AmpConfig(Section):
    enabled: bool = Field(True, description="Train under paddle.amp.auto_cast with a GradScaler.")
    level: Literal["O1", "O2"] = Field(
        "O1", description="O1: per-op casting by white/black list; O2: low-precision params with float32 master weights."
    )
    dtype: Literal["float16", "bfloat16"] = Field("float16", description="Low-precision compute type.")
    custom_white_list: tuple[str, ...] = Field((), description="Extra ops to run in low precision.")
    custom_black_list: tuple[str, ...] = Field((), description="Extra ops to keep in float32.")
    init_loss_scaling: float = Field(2.0**15, gt=0, description="Initial loss scale of the GradScaler.")
    incr_ratio: float = Field(2.0, gt=1, description="Factor the loss scale grows by after a run of finite steps.")
    decr_ratio: float = Field(0.5, gt=0, lt=1, description="Factor the loss scale shrinks by after overflows.")
    incr_every_n_steps: int = Field(1000, ge=1, description="Finite steps in a row before the scale grows.")
    decr_every_n_nan_or_inf: int = Field(2, ge=1, description="Overflowing steps before the scale shrinks.")
    use_dynamic_loss_scaling: bool = Field(True, description="Adjust the loss scale during training.")
    max_skipped_ratio: float = Field(
        0.05, ge=0, le=1,
        description="Largest share of steps skipped for inf/NaN gradients before the run fails (0.05 = 5 %).",
    )

    @field_validator("custom_white_list", "custom_black_list")
    @classmethod
    def _op_names_are_plain(cls, ops: tuple[str, ...]) -> tuple[str, ...]:
        bad = [op for op in ops if not op or not op.replace("_", "").isalnum()]
        if bad:
            raise ValueError(f"op names must be Paddle op types such as 'conv2d' or 'softmax', got {bad}")
        return ops


class TrainConfig(Section):
    architecture: str = Field(
        "digits_cnn", pattern=ARCHITECTURE_PATTERN,
        description="Network: 'digits_cnn', 'crnn' (text recognition), a paddle.vision.models name (resnet18, mobilenet_v2, ...) or 'package.module:factory'.",
    )
    nproc: int = Field(
        1, ge=1, le=1024, description="Data-parallel training processes (paddle.distributed.launch); 1 trains in-process."
    )
    epochs: int = Field(12, ge=1, le=10_000, description="Passes over the training split.")
    batch_size: int = Field(64, ge=1, le=65_536, description="Samples per training step (per process when nproc > 1).")
    # No upper bound: a rate that blows the loss up is caught while training (TrainingDiverged).
    learning_rate: float = Field(2e-3, gt=0, allow_inf_nan=False, description="Adam learning rate.")
    seed: int = Field(0, ge=0, description="Seed of weight initialisation and shuffling.")
    max_nonfinite_steps: int = Field(
        20, ge=1, description="Consecutive steps with a NaN/inf loss before training is declared diverged."
    )
    neck: Literal["conv", "bilstm"] = Field(
        "conv", description="crnn: the sequence neck over the backbone's columns; 'conv' quantizes to INT8 whole, "
        "'bilstm' keeps its LSTM in float."
    )
    grad_clip_norm: float | None = Field(
        None, gt=0, description="Clip the global L2 norm of the unscaled gradients to this value; null: no clipping."
    )
    amp: AmpConfig = Field(default_factory=AmpConfig, description="Mixed-precision settings.")
    init_from: str | None = Field(
        None, min_length=1, max_length=4096,
        description="Start from other FP32 weights: 'release', a version trained here ('v3') or a state-dict "
        "file (.npz; .pdparams with init_allow_pickle); null: freshly initialised weights.",
    )
    init_allow_pickle: bool = Field(
        False, description="Let init_from name a .pdparams file, a pickle that runs code when loaded (its sha256 is "
        "recorded); never allowed in a run started from a deployment.",
    )
    init_strict: bool = Field(
        True, description="Refuse init weights with missing, unexpected or mis-shaped keys; false: layers that do "
        "not fit (e.g. a new head) start fresh and are listed in the train manifest.",
    )

    @field_validator("init_from")
    @classmethod
    def _init_from_is_a_version_or_a_state_dict(cls, value: str | None) -> str | None:
        from quantgate.artifacts.layout import RELEASE
        from quantgate.artifacts.names import InvalidName, check_version

        if value is None or value == RELEASE:
            return value
        if value[:1] == "v" and value[1:].isdigit():
            try:
                return check_version(value)
            except InvalidName as exc:
                raise ValueError(str(exc)) from exc
        if not value.endswith((".npz", ".pdparams")):
            raise ValueError(f"must be {RELEASE!r}, a version such as 'v3', or a state-dict file ending in .npz "
                             "(read without pickle) or .pdparams (a pickle: also set train.init_allow_pickle: true)")
        return value

    @model_validator(mode="after")
    def _init_from_can_be_loaded(self) -> "TrainConfig":
        # Both are known from the config alone, so they fail before any store, data or Paddle is touched.
        if self.init_from is not None and self.init_from.endswith(".pdparams") and not self.init_allow_pickle:
            raise ValueError(
                f"train.init_from={self.init_from!r} is a pickle (.pdparams), and loading one runs whatever code its "
                "bytes name: convert it to .npz (numpy.savez of the state dict's arrays), or set "
                "train.init_allow_pickle: true if you trust the file"
            )
        if self.init_from is not None and self.nproc > 1:
            raise ValueError(f"train.init_from warm-starts single-process training only (train.nproc={self.nproc}); "
                             "set train.nproc: 1")
        return self


class TrainedModelConfig(Section):
    """A Paddle inference model trained elsewhere, gated instead of a model trained here."""

    path: str = Field(
        ..., min_length=1, description="Folder of the exported model (PaddleOCR tools/export_model.py, PaddleClas, "
        "PaddleX, paddle.jit.save): <prefix>.pdmodel and <prefix>.pdiparams (Paddle's legacy program format), or "
        "<prefix>.json and <prefix>.pdiparams (PIR, Paddle 3's default), whose <prefix>.yml gives the settings the "
        "config leaves out."
    )
    prefix: str = Field(
        "inference", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="The model files' stem when it is not 'inference' (e.g. 'model' for model.pdmodel).",
    )


def non_default_fields(section: BaseModel, default: BaseModel, where: str) -> list[str]:
    """Dotted names of the fields of `section` whose values differ from `default`'s, nested sections included."""
    changed = []
    for name in type(section).model_fields:
        value, default_value = getattr(section, name), getattr(default, name)
        if isinstance(value, BaseModel) and isinstance(default_value, BaseModel):
            changed += non_default_fields(value, default_value, f"{where}.{name}")
        elif value != default_value:
            changed.append(f"{where}.{name}")
    return changed


class PipelineConfig(Section):
    task: Literal["classification", "text_recognition", "text_detection", "ocr_system"] = Field(
        "classification", description="'classification': one class per image, top-1; 'text_recognition': one text "
        "line per image, CTC (datasets text_lines, digit_strings; architecture crnn or a factory); "
        "'text_detection': text boxes per page from a DB detector trained elsewhere (dataset text_boxes, "
        "trained_model); 'ocr_system': a detector, an optional direction classifier and a recognizer already "
        "gated in this store, judged end to end on pages (system, dataset text_boxes)."
    )
    model_name: str = Field(
        "digits-cnn", pattern=NAME_PATTERN, description="Name the versions are stored under (lowercase, digits, . _ -)."
    )
    trained_model: TrainedModelConfig | None = Field(
        None, description="A model trained elsewhere to quantize and gate as it is (nothing is trained; the data "
        "feeds calibration, validation and test only); null: train one as the train section says."
    )
    system: SystemConfig | None = Field(
        None, description="task ocr_system: the stored models the system is made of; null for the other tasks."
    )
    data: DataConfig = Field(default_factory=DataConfig, description="Dataset and split.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training and AMP.")
    quantize: QuantizeConfig = Field(default_factory=QuantizeConfig, description="PaddleSlim post-training quantization.")
    convert: ConvertConfig = Field(default_factory=ConvertConfig, description="paddle2onnx and the INT8 lowering for onnxruntime.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="FP32 vs INT8 evaluation in the listed runtimes.")
    gate: GatePolicy = Field(default_factory=GatePolicy, description="Release gate policy.")

    @model_validator(mode="after")
    def _latency_batch_is_the_tasks(self) -> "PipelineConfig":
        # Resolved once, here: every reader of evaluate (the stage, the search's trials, the records) sees an int.
        evaluate, batch = self.evaluate, task_latency_batch(self.task)
        if "latency_batch_size" not in evaluate.model_fields_set and evaluate.latency_batch_size != batch:
            evaluate = evaluate.model_copy(update={"latency_batch_size": batch})
            evaluate.model_fields_set.discard("latency_batch_size")  # still the task's, not the user's
            object.__setattr__(self, "evaluate", evaluate)
        return self

    @model_validator(mode="after")
    def _task_fits_the_data(self) -> "PipelineConfig":
        text_data, architecture = self.data.dataset in TEXT_DATASETS, self.train.architecture
        box_data = self.data.dataset in BOX_DATASETS
        if self.task == "ocr_system":
            if self.system is None or not box_data or self.trained_model is not None:
                raise ValueError("task 'ocr_system' needs a system section (detector, recognizer, optionally "
                                 "classifier: models gated in this store), data.dataset 'text_boxes' with the pages, "
                                 "and no trained_model")
            return self
        if self.system is not None:
            raise ValueError("the system section applies to task 'ocr_system' only")
        if self.task == "text_detection" and not box_data:
            raise ValueError(f"task 'text_detection' reads pages with boxes: set data.dataset to 'text_boxes' "
                             f"(got {self.data.dataset!r})")
        if box_data and self.task != "text_detection":
            raise ValueError("dataset 'text_boxes' holds pages with text boxes: set task: text_detection (or "
                             "ocr_system)")
        if self.task == "text_detection" and self.trained_model is None:
            raise ValueError("training a text detector is out of scope for quantgate: export your DB detector with "
                             "PaddleOCR (tools/export_model.py, legacy format) and set trained_model.path to it")
        if self.task == "text_recognition" and not text_data:
            raise ValueError(f"task 'text_recognition' reads text lines: set data.dataset to 'text_lines' or "
                             f"'digit_strings' (got {self.data.dataset!r})")
        if self.task == "classification" and text_data:
            raise ValueError(f"dataset {self.data.dataset!r} holds text lines: set task: text_recognition")
        if self.trained_model is not None:
            return self  # no network is built here: the model's own checks run before anything (stages/source)
        if text_data and architecture != "crnn" and ":" not in architecture:
            raise ValueError(f"task 'text_recognition' needs train.architecture 'crnn' or your recognizer's "
                             f"'package.module:factory' returning [N, T, C] logits (got {architecture!r})")
        if architecture == "crnn" and not text_data:
            raise ValueError("train.architecture 'crnn' is a text recognizer: use it with task: text_recognition")
        return self

    @model_validator(mode="after")
    def _architecture_fits_the_data(self) -> "PipelineConfig":
        # paddle.vision.models networks open with a 3-channel convolution.
        architecture = self.train.architecture
        if self.data.dataset in TEXT_DATASETS + BOX_DATASETS or self.trained_model is not None:
            return self
        if architecture != "digits_cnn" and ":" not in architecture:
            if self.data.dataset == "digits":
                raise ValueError(f"train.architecture={architecture!r} needs RGB images; the built-in digits are "
                                 "1-channel 8x8: use dataset 'image_folder' or architecture 'digits_cnn'")
            if self.data.transforms.color != "rgb":
                raise ValueError(f"train.architecture={architecture!r} needs RGB input; set data.transforms.color: rgb")
        return self

    @model_validator(mode="after")
    def _nothing_to_train_with_a_trained_model(self) -> "PipelineConfig":
        # Settings that only training reads would be ignored silently; a field merely present with its
        # default (as `quantgate config --example` writes every field) is fine.
        if self.trained_model is None:
            return self
        ignored = non_default_fields(self.train, TrainConfig(), "train")
        ignored += non_default_fields(self.data.augment, AugmentConfig(), "data.augment")
        if ignored:
            raise ValueError(f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with trained_model: nothing is trained here, the "
                             f"model in trained_model.path is quantized and gated as it is; remove them, or remove "
                             f"trained_model to train a model")
        if self.data.dataset == "digit_strings":
            raise ValueError("trained_model reads your own data: use data.dataset 'text_lines' (or 'image_folder'), "
                             "not the built-in digit_strings")
        if self.data.dataset == "text_lines" and not self.data.character_dict:
            raise ValueError("a trained recognizer reads its own dictionary: set data.character_dict to the file it "
                             "was trained with (PaddleOCR: e.g. ppocr_keys_v1.txt) and data.use_space_char as in its "
                             "training config")
        return self

    @model_validator(mode="after")
    def _search_has_a_validation_split(self) -> "PipelineConfig":
        if self.quantize.strategy == "search" and self.data.validation_fraction == 0:
            raise ValueError("quantize.strategy 'search' judges recipes on the validation split, and "
                             "data.validation_fraction is 0: set it (e.g. 0.1) or use quantize.strategy 'single'")
        return self

    @field_validator("model_name")
    @classmethod
    def _model_name_is_a_safe_path(cls, name: str) -> str:
        # The store's own rule (it also refuses '..'), checked here so a bad name fails before any run starts.
        from quantgate.artifacts.names import InvalidName, check_model

        try:
            return check_model(name)
        except InvalidName as exc:
            raise ValueError(str(exc)) from exc

    @model_validator(mode="after")
    def _per_runtime_thresholds_name_listed_runtimes(self) -> "PipelineConfig":
        # A runtime added to evaluate.runtimes must get its thresholds on purpose, never another runtime's.
        unnamed = self.gate.unnamed_runtimes(self.evaluate.runtimes)
        if unnamed:
            raise ValueError("; ".join(
                f"gate.{name} names no threshold for {', '.join(runtimes)}, which evaluate.runtimes lists: add "
                f"{' and '.join(f'{runtime}: <number>' for runtime in runtimes)} to the map, or give one number "
                "for every runtime" for name, runtimes in unnamed.items()))
        return self


def describe_validation_error(error: ValidationError) -> list[str]:
    """One readable line per bad field: where it is, what was given, what is allowed."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            problems.append(f"{where}: unknown key (check the spelling; see the schema in quantgate/config.py)")
            continue
        # A validator's own message may quote the value too (e.g. a long list of means): cut both.
        problems.append(f"{where}: {cut(item['msg'], 2 * ECHO_LIMIT)} (got {shown_value(item.get('input'))})")
    return problems


def validate_config(raw: dict[str, Any]) -> PipelineConfig:
    """Validate a plain dict into a PipelineConfig.

    Raises:
        ConfigError: listing every invalid or unknown field.
    """
    try:
        return PipelineConfig.model_validate(with_inference_yml(raw))
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from exc


def with_inference_yml(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with the settings a PIR trained model's `inference.yml` gives that `raw` leaves out
    (quantgate.inference_yml: dictionary, input shape, colour order, resize, DB thresholds); what `raw` gives wins.

    Raises:
        InferenceYmlProblem: the yml cannot be read (exit 2).
    """
    model = raw.get("trained_model") if isinstance(raw, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("path"), str) or not model["path"]:
        return raw
    from quantgate.inference_yml import merge_settings, yml_settings

    prefix = model.get("prefix") if isinstance(model.get("prefix"), str) else "inference"
    return merge_settings(raw, yml_settings(model["path"], prefix, str(raw.get("task", "classification"))))
