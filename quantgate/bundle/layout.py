"""What a bundle folder holds, spelled once: its file names and where each runtime's model files go.

    DIR/bundle.json                  sealed canonical manifest: format, model, version, lineage, runtimes, sha256 of every file
    DIR/model_card.md, .json         what the model is, how it was trained, quantized and gated (model_card.py)
    DIR/preprocessing.json           the data stage's record: steps, transforms, input shape
    DIR/classes.json                 classification: class names, in the order of the model's outputs
    DIR/characters.txt               text recognition: the dictionary, one character per line (id = line + 1, 0 = blank)
                                     (a text detector has neither: its DB post-processing is in preprocessing.json)
    DIR/<runtime>/fp32.onnx, int8.onnx                   an ONNX runtime's models (onnxruntime, openvino)
    DIR/<runtime>/fp32/model.pdmodel, model.pdiparams    a Paddle program and its parameters (paddle_inference)
    DIR/<runtime>/int8/model.pdmodel, model.pdiparams

Each runtime the version was gated on gets the FP32 and INT8 model in the form the evaluate stage ran
(it records each form's stage and files: "fp32_source", "int8_source"); a version evaluated before
several runtimes could be gated has onnxruntime's convert-stage models only.

An OCR system's bundle (`system_writer.py`) holds each component's files in a folder of its name instead:

    DIR/system.json                                   the system stage's record: components, drop_score, cls_thresh
    DIR/detector/fp32.onnx, int8.onnx, preprocessing.json
    DIR/classifier/fp32.onnx, int8.onnx, preprocessing.json, classes.json     (when the system has one)
    DIR/recognizer/fp32.onnx, int8.onnx, preprocessing.json, characters.txt
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

# An OCR system's components, in pipeline order, and its stage's record (stages/system/).
from quantgate.ocr.combos import CLASSIFIER, DETECTOR, RECOGNIZER  # noqa: F401
from quantgate.ocr.combos import COMPONENTS as SYSTEM_COMPONENTS  # noqa: F401
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.stages.data.outputs import DICTIONARY_FILE as DATA_DICTIONARY_FILE
from quantgate.stages.evaluate.outputs import ONNXRUNTIME, OPENVINO, RUNTIME_NAMES
from quantgate.stages.system.outputs import OUTPUTS as SYSTEM_OUTPUTS
from quantgate.stages.system.outputs import SYSTEM_FILE  # noqa: F401
from quantgate.stages.system.outputs import TASK_NAME as OCR_SYSTEM

# bundle.json "task" (absent in bundles from before tasks: classification)
from quantgate.tasks import CLASSIFICATION, TEXT_DETECTION, TEXT_RECOGNITION  # noqa: F401

BUNDLE_FILE = "bundle.json"
MODEL_CARD_MD = "model_card.md"
MODEL_CARD_JSON = "model_card.json"
PREPROCESSING_FILE = "preprocessing.json"
CLASSES_FILE = "classes.json"
# A text recognizer's dictionary, copied from the data stage under its name there (PaddleOCR's format).
DICTIONARY_FILE = DATA_DICTIONARY_FILE

# An OCR system's version: a "system" stage whose system.json names a passed detector, (classifier) and
# recognizer version of the same store.
SYSTEM_STAGE = SYSTEM_OUTPUTS.stage
# The runtimes a system's bundle runs its components' ONNX models in (it holds no Paddle programs).
SYSTEM_RUNTIMES = (ONNXRUNTIME, OPENVINO)

FORMAT = "quantgate-bundle"
# The newest format this quantgate reads, and the one it writes. Version 2 added text recognizers (bundle.json
# "task", characters.txt instead of classes.json); version 3 text detectors (task "text_detection": no class list,
# the DB post-processing in preprocessing.json) and OCR systems (task "ocr_system": "components", "drop_score",
# "cls_thresh", system.json). Until version 3 each bundle was written with the oldest version that described it
# (1 for a classifier). Version 4 added "latencies" (each runtime's latencies as the run measured them, and on
# which machine), by which predict picks a runtime when none is named; every bundle records them, so every
# bundle is written as version 4. Versions 1 to 3 are still read (predict ranks them by their model card).
FORMAT_VERSION = 4

# The tasks a bundle can hold ("task" in bundle.json; absent: classification).
TASKS = (CLASSIFICATION, TEXT_RECOGNITION, TEXT_DETECTION, OCR_SYSTEM)

DEFAULT_RUNTIME = ONNXRUNTIME
KNOWN_RUNTIMES = RUNTIME_NAMES
PRECISIONS = ("fp32", "int8")
# bundle.json's {runtime: why} for the runtimes the evaluation found not applicable to the model (Paddle
# Inference and a PIR program): none of their models is shipped, and predict names the reason when one is asked for.
RUNTIMES_NOT_APPLICABLE = "runtimes_not_applicable"
# The key of an evaluated runtime's entry naming where a precision's model lies: {"stage", "files"}.
SOURCE_KEY = "{precision}_source"


@dataclass(frozen=True)
class ModelFile:
    """One file of a runtime's model: where it comes from in the version, and where it lies in the bundle."""

    stage: str
    file: str
    path: str  # relative to the bundle folder, "/"-separated


def bundle_path(runtime: str, precision: str, file: str, files_in_model: int) -> str:
    """Where a model file goes: `<runtime>/<precision>.onnx` for a one-file model, else the files keep their
    names in `<runtime>/<precision>/` (a Paddle program is loaded from its folder by those names)."""
    if files_in_model == 1:
        return f"{runtime}/{precision}{PurePosixPath(file).suffix}"
    return f"{runtime}/{precision}/{file}"


# A version evaluated before several runtimes could be gated ran onnxruntime on the convert stage's models.
MODELS_BEFORE_MULTI_RUNTIME = {
    ONNXRUNTIME: {precision: (ModelFile("convert", name, bundle_path(ONNXRUNTIME, precision, name, 1)),)
                  for precision, name in (("fp32", FP32_FILE), ("int8", INT8_FILE))},
}
