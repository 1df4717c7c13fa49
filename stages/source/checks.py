"""Checks of a trained model before anything runs: is there a model, is it FP32, can the data feed it, do its
outputs fit the task and the dictionary or class list, do one calibration sample and evaluate's latency batch fit
the memory budget. Every problem of the model is named with its fix, all at once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from quantgate.config import BOX_DATASETS, TEXT_DATASETS, DataConfig, PipelineConfig, TrainedModelConfig
from quantgate.int8.latency_memory import check_latency_batch_fits
from quantgate.int8.program_memory import check_one_sample_fits
from quantgate.stages.source.errors import ModelProblem
from quantgate.stages.source.model_summary import ModelSummary, summarize
from quantgate.stages.source.pir import is_pir_model, pir_folder, pir_summary

LISTED_FILES = 12
DEFAULT_SIDE = 224  # the sample size tried where neither the model nor the transforms fix height and width


@dataclass(frozen=True)
class CheckedModel:
    """A model folder that passed every check: its two files, their digests, and what the program is."""

    folder: Path
    prefix: str
    files: dict[str, dict]  # file name -> {"sha256", "bytes"}, every file of the folder that belongs to the model
    summary: ModelSummary
    program_format: str = "legacy"  # "pir": <prefix>.json, read and converted in child processes (source.pir)


def _digest(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}


def model_files(config: TrainedModelConfig) -> tuple[Path, dict[str, dict]]:
    """The folder and `{file: {"sha256", "bytes"}}` of the model's files (<prefix>.pdmodel, .pdiparams and any
    other <prefix>.* beside them, such as PaddleOCR's .pdiparams.info).

    Raises:
        ModelProblem: the folder is missing, holds neither a legacy-format nor a PIR model with that prefix (what
            it holds is listed), or its <prefix>.json is not a PIR program.
    """
    folder = Path(config.path).expanduser().resolve()
    if not folder.is_dir():
        raise ModelProblem([f"trained_model.path {folder} is not a folder; point it at the folder your export wrote "
                            "(PaddleOCR: Global.save_inference_dir of tools/export_model.py)"])
    model, params = folder / f"{config.prefix}.pdmodel", folder / f"{config.prefix}.pdiparams"
    if model.is_file() and params.is_file():
        files = sorted(path for path in folder.iterdir() if path.is_file() and path.name.startswith(f"{config.prefix}."))
        return folder, {path.name: _digest(path) for path in files}
    if is_pir_model(folder, config.prefix):
        found = pir_folder(folder, config.prefix)
        files = sorted(path for path in folder.iterdir() if path.is_file() and path.name.startswith(f"{config.prefix}."))
        return found.folder, {path.name: _digest(path) for path in files}
    present = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in folder.iterdir())
    shown = ", ".join(present[:LISTED_FILES]) + (f" and {len(present) - LISTED_FILES} more" if len(present) > LISTED_FILES
                                                 else "") if present else "nothing"
    stems = sorted({path.name[:-len(".pdmodel")] for path in folder.glob("*.pdmodel")})
    if stems:
        fix = f"set trained_model.prefix to {stems[0]!r} (the stem of {stems[0]}.pdmodel)"
    elif any(path.suffix == ".pdparams" for path in folder.iterdir()):
        fix = ("a .pdparams file is a training checkpoint (a pickle), not an inference model: export it first "
               "(PaddleOCR: python tools/export_model.py -c CONFIG.yml -o Global.pretrained_model=... "
               "Global.save_inference_dir=DIR) and point trained_model.path at DIR")
    else:
        fix = "point trained_model.path at the folder your export wrote"
    raise ModelProblem([f"trained_model.path {folder} holds no {model.name} + {params.name} (legacy format) and no "
                        f"{config.prefix}.json + {params.name} (PIR, Paddle 3's default) (found: {shown}); {fix}"])


def expected_input(data: DataConfig) -> tuple[int, int | None, int | None]:
    """[C, H, W] the data stage will feed (None where the images' own size decides)."""
    transforms = data.transforms
    if data.dataset in TEXT_DATASETS:
        return tuple(transforms.rec_image_shape)
    if data.dataset in BOX_DATASETS:
        return (3, *transforms.det_canvas)
    channels = 1 if transforms.color == "grayscale" else 3
    if transforms.resize_pad is not None:
        return (channels, *transforms.resize_pad)
    crop = transforms.center_crop
    if crop is not None:
        return (channels, crop, crop) if isinstance(crop, int) else (channels, *crop)
    if isinstance(transforms.resize, tuple):
        return (channels, *transforms.resize)
    return channels, None, None


def expected_classes(config: PipelineConfig) -> tuple[int | None, str]:
    """How many outputs per position the model must have, and where that number comes from."""
    data = config.data
    if data.dataset in TEXT_DATASETS:
        from quantgate.samples.text_labels import read_dictionary

        characters = read_dictionary(Path(data.character_dict).expanduser())
        space = " + 1 space (data.use_space_char)" if data.use_space_char else ""
        return (len(characters) + 1 + data.use_space_char,
                f"data.character_dict's {len(characters)} characters + 1 CTC blank{space}")
    if data.class_names is not None:
        return len(data.class_names), f"data.class_names' {len(data.class_names)} names"
    root = Path(data.path).expanduser()
    folders = [entry for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith(".")] \
        if root.is_dir() else []
    return (len(folders), f"the {len(folders)} class folders under data.path (set data.class_names to the model's "
                          "whole class list in output order when the folders are only some of its classes)") \
        if folders else (None, "")


def _input_problems(summary: ModelSummary, wanted: tuple[int, int | None, int | None], data: DataConfig) -> list[str]:
    if len(summary.inputs) != 1:
        names = ", ".join(spec.name for spec in summary.inputs)
        return [f"the model takes {len(summary.inputs)} inputs ({names}); quantgate feeds one image tensor "
                "[N, C, H, W]: export the model with a single image input"]
    spec = summary.inputs[0]
    if len(spec.shape) != 4 or spec.dtype != "float32":
        return [f"the model's input {spec.name} is {spec.dtype} {list(spec.shape)}; quantgate feeds float32 "
                "[N, C, H, W] images"]
    problems = []
    setting = "data.transforms.rec_image_shape" if data.dataset in TEXT_DATASETS else \
        "data.transforms.det_canvas" if data.dataset in BOX_DATASETS else "data.transforms"
    for axis, have, want in zip("CHW", spec.shape[1:], wanted):
        if have > 0 and want is not None and have != want:
            problems.append(f"the model's input {spec.name} {list(spec.shape)} has {axis}={have}, but {setting} "
                            f"gives {axis}={want} ({list(wanted)}); set {setting} to the shape it was trained on"
                            + (" (C 3: color rgb or bgr; C 1: grayscale)" if axis == "C" else ""))
    return problems


def _output_kind(shape: tuple[int, ...]) -> str:
    """What an output of `shape` is, in words: the first thing the checks below tell the user."""
    if len(shape) == 4 and shape[1] == 1:
        return "a text detector"
    return {2: "a classifier's [N, classes]", 3: "a recognizer's [N, T, C]"}.get(len(shape), f"a {len(shape)}-D output")


def _wrong_kind(summary: ModelSummary, config: PipelineConfig) -> str | None:
    """Why the model is the wrong kind for the task (a detector given to text_recognition, a recognizer or
    classifier given to text_detection), from its declared output; None when it may fit."""
    if len(summary.outputs) != 1:
        return None
    shape = summary.measured_output_shape or summary.outputs[0].shape
    detector = _output_kind(shape) == "a text detector"
    if detector != (config.task == "text_detection"):
        problems = _output_problems(summary, config)
        return problems[0] if problems else None
    return None


def _output_problems(summary: ModelSummary, config: PipelineConfig) -> list[str]:
    if len(summary.outputs) != 1:
        return [f"the model has {len(summary.outputs)} outputs ({', '.join(o.name for o in summary.outputs)}); "
                "quantgate gates models with one output: export the inference model with one"]
    shape = summary.measured_output_shape or summary.outputs[0].shape
    text = config.task == "text_recognition"
    kind = _output_kind(shape)
    if config.task == "text_detection":
        if kind != "a text detector":
            return [f"task text_detection needs a DB detector's [N, 1, H, W] probability map, but the model outputs "
                    f"{list(shape)} ({kind}); import your detector, or set task to "
                    f"{'text_recognition' if len(shape) == 3 else 'classification'} for this model"]
        return []
    if kind == "a text detector":
        return [f"the model outputs {list(shape)}, a text detector's [N, 1, H, W] probability map, but task is "
                f"{config.task}; set task: text_detection and data.dataset: text_boxes (pages with PaddleOCR's "
                "detection labels)"]
    if text and len(shape) != 3:
        return [f"task text_recognition needs a recognizer's [N, T, C] output, but the model outputs "
                f"{list(shape)}: a {len(shape)}-D output is {'a classifier' if len(shape) == 2 else 'not a CTC head'}"
                "; set task: classification, or import the recognizer"]
    if not text and len(shape) != 2:
        return [f"task classification needs an [N, classes] output, but the model outputs {list(shape)}"
                + ("; an [N, T, C] output is a text recognizer: set task: text_recognition and data.dataset: "
                   "text_lines" if len(shape) == 3 else "")]
    wanted, why = expected_classes(config)
    if wanted is not None and shape[-1] > 0 and shape[-1] != wanted:
        fix = ("use the dictionary the model was trained with, and data.use_space_char as in its training config"
               if text else "set data.class_names to the model's classes in output order")
        return [f"the model outputs {shape[-1]} {'scores per position' if text else 'classes'}, but {why} make "
                f"{wanted}; {fix}"]
    return []


def check_trained_model(config: PipelineConfig) -> CheckedModel:
    """Every check of `config.trained_model` against the task and the data settings, before anything runs.

    Raises:
        ModelProblem: listing every problem (no model, PIR format, already INT8, inputs the transforms cannot
            produce, outputs that do not fit the task, dictionary or class list).
        BadTextLines: data.character_dict cannot be read.
        MemoryRefused: calibrating one sample of the data's input size does not fit the memory budget, or the
            evaluate stage's latency batch (evaluate.latency_batch_size, at a fixed batch) would not.
    """
    folder, files = model_files(config.trained_model)
    prefix = folder / config.trained_model.prefix
    wanted = expected_input(config.data)
    if is_pir_model(folder, config.trained_model.prefix):
        return _check_pir_model(config, folder, files, wanted)
    try:
        bare = summarize(prefix)
    except (RuntimeError, ValueError, OSError) as exc:
        raise ModelProblem([f"{prefix}.pdmodel cannot be loaded as a Paddle inference program "
                            f"({type(exc).__name__}: {str(exc)[:300]}); export it again with paddle.jit.save or "
                            "your tool's export command"]) from exc
    declared = bare.inputs[0].shape[1:] if len(bare.inputs) == 1 and len(bare.inputs[0].shape) == 4 else ()
    sample = tuple(want or (have if have > 0 else DEFAULT_SIDE) for want, have in
                   zip(wanted, declared)) if declared else None
    runnable = sample and not _input_problems(bare, wanted, config.data)
    if runnable:
        check_one_sample_fits(prefix, sample)  # before the sample below runs in this process
        if None not in wanted:  # the data fixes the size: the evaluate stage's latency batch is known too
            evaluate = config.evaluate
            check_latency_batch_fits(prefix, sample, evaluate.runtimes, evaluate.latency_batch_size, evaluate.threads)
    try:
        summary = summarize(prefix, sample) if runnable else bare
    except (RuntimeError, ValueError, OSError):
        # The program loads but cannot run the data's sample (e.g. a detector fed a 48-pixel text line): the
        # declared shapes still tell what the model is, which the checks below name.
        summary = bare
    problems = []
    if summary.quantized_ops or summary.int8_parameters:
        found = ", ".join(f"{op} x{count}" for op, count in summary.quantized_ops.items()) or \
            f"int8 weights {summary.int8_parameters[:5]}"
        problems.append(f"the model is already INT8 ({found}); give quantgate the FP32 export it was quantized from")
    wrong_kind = _wrong_kind(summary, config)
    if wrong_kind:  # a detector where a recognizer belongs (or the reverse): its input sizes are beside the point
        problems.append(wrong_kind)
    else:
        problems += _input_problems(summary, wanted, config.data)
    if not problems:
        problems += _output_problems(summary, config)
    if problems:
        raise ModelProblem(problems)
    return CheckedModel(folder, config.trained_model.prefix, files, summary)


def _check_pir_model(config: PipelineConfig, folder: Path, files: dict[str, dict],
                     wanted: tuple[int, int | None, int | None]) -> CheckedModel:
    """The checks above for a PIR model: its JSON says what it is, one sample runs in a child process. The memory
    checks measure a legacy program in this process and are not made (the child's run is bounded by the sample)."""
    from quantgate.pir.converter import find_converter
    from quantgate.pir.errors import PirProblem

    find_converter()  # paddle2onnx 2.x converts it: a missing install is named now, before anything runs
    found = pir_folder(folder, config.trained_model.prefix)
    bare = pir_summary(found, None)
    declared = bare.inputs[0].shape[1:] if len(bare.inputs) == 1 and len(bare.inputs[0].shape) == 4 else ()
    sample = tuple(want or (have if have > 0 else DEFAULT_SIDE) for want, have in
                   zip(wanted, declared)) if declared else None
    summary = bare
    if sample and not _input_problems(bare, wanted, config.data):
        try:
            summary = pir_summary(found, sample)
        except PirProblem:
            summary = bare  # the declared shapes still tell what the model is
    problems = []
    if summary.quantized_ops or summary.int8_parameters:
        problems.append(f"the model is already INT8 ({summary.quantized_ops or summary.int8_parameters[:5]}); give "
                        "quantgate the FP32 export it was quantized from")
    wrong_kind = _wrong_kind(summary, config)
    problems += [wrong_kind] if wrong_kind else _input_problems(summary, wanted, config.data)
    if not problems:
        problems += _output_problems(summary, config)
    if problems:
        raise ModelProblem(problems)
    return CheckedModel(folder, config.trained_model.prefix, files, summary, program_format="pir")
