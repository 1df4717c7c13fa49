"""A stored, gated model as the OCR system uses it: its data stage's record and its convert folder, made into the
engine's detector, classifier and recognizer specs (the system stage and the bundle build them the same way)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantgate.config import TransformsConfig
from quantgate.ocr.engine import ClassifierSpec, DetectorSpec, ModelFiles, RecognizerSpec
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE
from quantgate.tasks.db_postprocess import DBParams


@dataclass(frozen=True)
class Component:
    """One stored, passed version as the system uses it: its data stage's record and its convert folder."""

    spec: dict  # the component's dataset.json
    convert_dir: Path
    outputs_are_probabilities: bool = True  # the model ends in softmax (PaddleOCR's cls and rec do)


def detector_spec(component: Component) -> DetectorSpec:
    transforms = TransformsConfig.model_validate(component.spec["transforms"])
    return DetectorSpec(ModelFiles(component.convert_dir / FP32_FILE, component.convert_dir / INT8_FILE),
                        tuple(transforms.det_canvas), transforms.det_limit_side_len, transforms.det_limit_type,
                        tuple(transforms.mean), tuple(transforms.std), transforms.color,
                        DBParams(**component.spec["postprocess"]))


def classifier_spec(component: Component, thresh: float) -> ClassifierSpec:
    return ClassifierSpec(ModelFiles(component.convert_dir / FP32_FILE, component.convert_dir / INT8_FILE),
                          TransformsConfig.model_validate(component.spec["transforms"]),
                          tuple(component.spec["classes"]), thresh,
                          outputs_are_probabilities=component.outputs_are_probabilities)


def recognizer_spec(component: Component) -> RecognizerSpec:
    return RecognizerSpec(ModelFiles(component.convert_dir / FP32_FILE, component.convert_dir / INT8_FILE),
                          TransformsConfig.model_validate(component.spec["transforms"]),
                          tuple(component.spec["characters"]), component.outputs_are_probabilities)
