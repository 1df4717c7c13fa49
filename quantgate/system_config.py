"""The `system` section of the configuration: an OCR system (detector → crops → recognizer) made of models
already gated and stored, each with its own pre-processing and dictionary. Re-exported by `quantgate.config`."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from quantgate.config_base import Section

# MODEL, or MODEL/vN: the store's model names (artifacts/names.py) and version numbers.
COMPONENT = re.compile(r"^(?P<model>[a-z0-9][a-z0-9._-]*)(/(?P<version>v[1-9][0-9]*))?$")


def split_component(value: str) -> tuple[str, str | None]:
    """(model, version or None: its release) of a component reference."""
    found = COMPONENT.match(value)
    return found["model"], found["version"]


class SystemConfig(Section):
    """task: ocr_system: which stored versions make the system, and PaddleOCR's system settings."""

    detector: str = Field(..., description="A passed task: text_detection model in this store: MODEL (its "
                          "`release`) or MODEL/vN.")
    classifier: str | None = Field(
        None, description="Optional text-direction classifier (a passed classification model with classes "
        "'0' and '180', e.g. PaddleOCR's cls): MODEL or MODEL/vN; null: crops go to the recognizer as cut."
    )
    recognizer: str = Field(..., description="A passed task: text_recognition model in this store: MODEL or "
                            "MODEL/vN.")
    drop_score: float = Field(
        0.5, ge=0, lt=1, description="Lines read with a mean confidence below this are dropped (PaddleOCR's "
        "drop_score)."
    )
    cls_thresh: float = Field(
        0.9, gt=0, lt=1, description="A crop is turned by 180 degrees when the classifier says '180' with a "
        "probability above this (PaddleOCR's cls_thresh)."
    )

    @field_validator("detector", "classifier", "recognizer")
    @classmethod
    def _a_model_or_version(cls, value: str | None) -> str | None:
        if value is not None and not COMPONENT.match(value):
            raise ValueError(f"{value!r} is not MODEL or MODEL/vN (lowercase model name, version like v3)")
        return value
