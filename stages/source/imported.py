"""The source stage: a trained model's files kept byte for byte, checked against the data stage, with the record
of where they came from."""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from quantgate.config import PipelineConfig
from quantgate.samples.reading import open_data
from quantgate.stages.source.checks import check_trained_model
from quantgate.stages.source.errors import ModelProblem
from quantgate.stages.source.outputs import (
    INPUT_SPEC,
    MODEL_FILE,
    OPS,
    ORIGIN,
    OUTPUT_SPEC,
    PARAMETER_TENSORS,
    PARAMETERS,
    PARAMS_FILE,
    PIR_PROGRAM_FILE,
    PROGRAM_FORMAT,
    SETTINGS,
    SETTINGS_FILE,
    TRAINED_HERE,
)
from quantgate.stages.source.pir import PIR_FORMAT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceResult:
    metrics: dict


def _copy_verified(source: Path, target: Path, recorded: dict) -> None:
    """Copy `source` to `target` and prove the copy holds the bytes that were checked.

    Raises:
        ModelProblem: the file changed since it was checked (someone is writing the export folder).
    """
    shutil.copyfile(source, target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != recorded["sha256"]:
        raise ModelProblem([f"{source} changed while it was being imported (sha256 {digest[:12]}…, checked "
                            f"{recorded['sha256'][:12]}…); wait for the export to finish and run again"])


def settings_record(config: PipelineConfig, checked) -> dict:
    """Per setting the model's inference.yml gives: the value this run uses and where it came from (the yml, or
    the config, which wins); {} without a yml."""
    from quantgate.inference_yml import provenance, yml_settings

    settings = yml_settings(str(checked.folder), checked.prefix, config.task)
    return provenance(config.model_dump(mode="json"), settings) if settings else {}


def import_model(config: PipelineConfig, data_dir: Path, out_dir: Path) -> SourceResult:
    """Check `config.trained_model` (stages.source.checks) and the data stage's record against it, and keep its
    program and parameters as `inference.pdmodel` / `inference.pdiparams` in `out_dir` (a PIR model: `inference.json`,
    `inference.pdiparams` and its `inference.yml`, with the record of which settings came from the yml).

    Raises:
        ModelProblem: the model does not fit (see `check_trained_model`), its input shape is not the data's,
            or its files changed during the import.
    """
    checked = check_trained_model(config)
    data = open_data(data_dir)
    spec, summary = checked.summary.inputs[0], checked.summary
    mismatched = [f"{axis}={have} (data: {want})" for axis, have, want in zip("CHW", spec.shape[1:], data.input_shape)
                  if have > 0 and have != want]
    if mismatched:
        raise ModelProblem([f"the model's input {spec.name} {list(spec.shape)} does not take the data stage's images "
                            f"{list(data.input_shape)}: {', '.join(mismatched)}; set data.transforms to the size it "
                            "was trained on"])
    shape = summary.measured_output_shape or summary.outputs[0].shape
    classes = shape[1] if data.is_detection else shape[-1]  # a detector's [N, 1, H, W]: one map
    if classes > 0 and classes != data.num_classes:
        raise ModelProblem([f"the model outputs {classes} classes, the data stage records {data.num_classes}; set "
                            "data.class_names (or data.character_dict) to the model's"])
    prefix, pir = checked.prefix, checked.program_format == "pir"
    program, kept = (f"{prefix}.json", PIR_PROGRAM_FILE) if pir else (f"{prefix}.pdmodel", MODEL_FILE)
    _copy_verified(checked.folder / program, Path(out_dir) / kept, checked.files[program])
    if pir and f"{prefix}.yml" in checked.files:
        _copy_verified(checked.folder / f"{prefix}.yml", Path(out_dir) / SETTINGS_FILE, checked.files[f"{prefix}.yml"])
    _copy_verified(checked.folder / f"{prefix}.pdiparams", Path(out_dir) / PARAMS_FILE,
                   checked.files[f"{prefix}.pdiparams"])
    log.info("source: %s/%s.* imported (%d parameters in %d tensors, %d ops)", checked.folder, prefix,
             summary.parameters, summary.parameter_tensors, sum(summary.ops.values()))
    output = {**summary.outputs[0].as_record(), "kind": summary.output_kind,
              "measured_shape": list(summary.measured_output_shape or ())}
    return SourceResult(metrics={
        TRAINED_HERE: False,
        "task": config.task,
        ORIGIN: {"path": str(checked.folder), "prefix": prefix, "files": checked.files,
                 "format": PIR_FORMAT if pir else "paddle-legacy-program",
                 "note": "trained elsewhere: no training, no AMP in this run"},
        PROGRAM_FORMAT: checked.program_format,
        **({SETTINGS: settings_record(config, checked)} if pir else {}),
        INPUT_SPEC: spec.as_record(),
        OUTPUT_SPEC: output,
        OPS: summary.ops,
        PARAMETERS: summary.parameters,
        PARAMETER_TENSORS: summary.parameter_tensors,
    })
