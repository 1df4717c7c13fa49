"""What a bundle is made from, read from the store through its public API: the version's record, its
effective gate verdict, and the verified manifest and folder of each stage it draws on."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from quantgate.artifacts import ArtifactError, ArtifactStore, VersionRef
from quantgate.bundle.layout import (
    CLASSIFICATION,
    DICTIONARY_FILE,
    KNOWN_RUNTIMES,
    MODELS_BEFORE_MULTI_RUNTIME,
    PRECISIONS,
    SOURCE_KEY,
    TEXT_DETECTION,
    ModelFile,
    bundle_path,
)
from quantgate.errors import BadInput, Rejected
from quantgate.policy.runtimes import inapplicable_runtimes
from quantgate.stages.data.outputs import DATASET_FILE, PREPROCESSING
from quantgate.stages.source.outputs import OUTPUTS as SOURCE_OUTPUTS

# The stages a bundle reads: models (export, quantize, convert), the data record, and the card's evidence.
STAGES = ("data", "train", "export", "quantize", "convert", "evaluate", "gate")
SOURCE_STAGE = SOURCE_OUTPUTS.stage  # replaces "train" for a model trained elsewhere


class NotPassed(Rejected):
    """The version's gate did not pass (or cannot be verified), so it is not bundled (exit 1, as `promote`)."""


class CannotBundle(BadInput):
    """The version lacks something a bundle needs, or its stored files changed while being read (exit 2)."""


@dataclass(frozen=True)
class VersionSources:
    """A passed version's records, each stage's verified manifest, and the folder holding its files."""

    store: ArtifactStore
    ref: VersionRef
    record: dict
    verdict: str  # why the version may be released, as `ArtifactStore.release_verdict` says
    gate: dict  # the gate record behind that verdict: the newest decision's, else the run's own
    decision: int | None  # that decision's number, or None for the run's own gate
    manifests: dict[str, dict]
    folders: dict[str, Path]
    runtimes: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.ref.model}/{self.ref.version}"

    def metrics(self, stage: str) -> dict:
        return self.manifests[stage]["metrics"]

    @property
    def not_applicable(self) -> dict[str, str]:
        """{runtime: why} for the listed runtimes the evaluation found not applicable to the model (not shipped)."""
        return inapplicable_runtimes(self.metrics("evaluate"))

    @property
    def output_kind(self) -> str:
        """"probabilities" for a model trained elsewhere that ends in softmax, else "logits" (models trained here)."""
        output = self.metrics(SOURCE_STAGE).get("output", {}) if SOURCE_STAGE in self.manifests else {}
        return str(output.get("kind", "logits"))

    @property
    def trained_stage(self) -> str:
        """"train", or "source" for a model trained elsewhere."""
        return SOURCE_STAGE if SOURCE_STAGE in self.manifests else "train"

    def recorded_sha256(self, stage: str, name: str) -> str:
        return self.manifests[stage]["files"][name]["sha256"]

    def read_json(self, stage: str, name: str) -> object:
        """A stage's JSON file, parsed from bytes checked against the stage's manifest as they were read."""
        data = (self.folders[stage] / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.recorded_sha256(stage, name):
            raise CannotBundle(f"{self.label} {stage}/{name} changed while it was being read; run "
                               "`quantgate fsck` and bundle again")
        return json.loads(data)

    @property
    def task(self) -> str:
        """The data stage's task: "classification" (also for records from before tasks), "text_recognition" or
        "text_detection"."""
        return str(self.read_json("data", DATASET_FILE).get("task", CLASSIFICATION))

    def characters(self) -> list[str]:
        """A text recognizer's dictionary, in id order, as the data stage recorded it."""
        characters = [str(character) for character in self.read_json("data", DATASET_FILE)["characters"]]
        if len(characters) + 1 != int(self.metrics("data")["num_classes"]):
            raise CannotBundle(f"{self.label}: the data stage's dictionary has {len(characters)} characters but it "
                               f"records num_classes={self.metrics('data')['num_classes']} (characters + the CTC "
                               "blank); run `quantgate fsck`")
        return characters

    def dictionary(self) -> bytes:
        """characters.txt as the data stage stored it, checked against its manifest and its dataset record.

        Raises:
            CannotBundle: the data stage holds no dictionary, or it differs from the dataset record.
        """
        characters = self.characters()
        if DICTIONARY_FILE not in self.manifests["data"]["files"]:
            raise CannotBundle(f"cannot bundle {self.label}: its data stage holds no {DICTIONARY_FILE}, which a text "
                               "recognizer's bundle decodes with; run it again with `quantgate run`")
        data = (self.folders["data"] / DICTIONARY_FILE).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.recorded_sha256("data", DICTIONARY_FILE):
            raise CannotBundle(f"{self.label} data/{DICTIONARY_FILE} changed while it was being read; run "
                               "`quantgate fsck` and bundle again")
        if data.decode("utf-8").removesuffix("\n").split("\n") != characters:
            raise CannotBundle(f"{self.label}: data/{DICTIONARY_FILE} differs from the dictionary the data stage "
                               "recorded in its dataset.json; run `quantgate fsck`")
        return data

    def classes(self) -> list[str]:
        classes = [str(name) for name in self.read_json("data", DATASET_FILE)["classes"]]
        if len(classes) != int(self.metrics("data")["num_classes"]):
            raise CannotBundle(f"{self.label}: the data stage names {len(classes)} classes but records "
                               f"num_classes={self.metrics('data')['num_classes']}; run `quantgate fsck`")
        return classes

    def model_files(self, runtime: str) -> dict[str, tuple[ModelFile, ...]]:
        """`runtime`'s model files per precision, in the form the evaluate stage ran (its "<precision>_source").

        Raises:
            CannotBundle: the evaluation names a model that its stage does not hold, or names none.
        """
        entry = (self.metrics("evaluate").get("runtimes") or {}).get(runtime)
        if entry is None and runtime in MODELS_BEFORE_MULTI_RUNTIME:
            return MODELS_BEFORE_MULTI_RUNTIME[runtime]
        forms = {}
        for precision in PRECISIONS:
            source = (entry or {}).get(SOURCE_KEY.format(precision=precision))
            stage, names = (source.get("stage"), source.get("files")) if isinstance(source, dict) else (None, None)
            if stage not in self.manifests or not isinstance(names, list) or not names \
                    or any(name not in self.manifests[stage]["files"] for name in names):
                raise CannotBundle(f"cannot bundle {self.label}: its evaluation does not say which stored files its "
                                   f"{runtime} {precision} model is ({SOURCE_KEY.format(precision=precision)}: "
                                   f"{source!r}); evaluate it again with `quantgate run`")
            forms[precision] = tuple(ModelFile(stage, name, bundle_path(runtime, precision, name, len(names)))
                                     for name in names)
        return forms

    def preprocessing(self) -> dict:
        """The data stage's record of what a deployment does to an input (and, for a detector, to its map).

        Raises:
            CannotBundle: there is none, or a detector's lacks its DB post-processing.
        """
        record = self.metrics("data").get(PREPROCESSING)
        if not isinstance(record, dict) or "transforms" not in record:
            raise CannotBundle(f"{self.label} records no preprocessing in its data stage (it was made before quantgate "
                               "recorded one), so a deployment could not prepare its inputs; run it again with "
                               "`quantgate run` and bundle the new version")
        if self.task == TEXT_DETECTION and not isinstance(record.get("postprocess"), dict):
            raise CannotBundle(f"{self.label} records no DB post-processing in its data stage's preprocessing, so a "
                               "deployment could not turn the detector's map into boxes; run it again with "
                               "`quantgate run` and bundle the new version")
        return record


def refuse_unless_passed(store: ArtifactStore, ref: VersionRef) -> tuple[str, str]:
    """("MODEL/vN", the verdict's reason) of `ref`, once its effective verdict (`ArtifactStore.release_verdict`) is a
    pass.

    Raises:
        NotPassed: it is not (the status and the reason named, with what to do).
    """
    label = f"{ref.model}/{ref.version}"
    passed, why = store.release_verdict(ref)
    if not passed:
        status = store.version_record(ref).get("status", "incomplete")
        raise NotPassed(f"refusing to bundle {label} (status {status!r}): {why}. Bundle a version whose gate passed "
                        f"(`quantgate versions` lists them), or decide again with `quantgate gate {ref.version}`; "
                        "nothing was written")
    return label, why


def read_sources(store: ArtifactStore, ref: VersionRef) -> VersionSources:
    """Everything a bundle of `ref` needs, once its gate verdict passed and each stage verified.

    Raises:
        NotPassed: the version's effective verdict (`ArtifactStore.release_verdict`) is not a pass.
        CannotBundle: a stage is missing or damaged, or the evaluation names a runtime quantgate cannot package.
    """
    label, why = refuse_unless_passed(store, ref)
    try:
        record = store.version_record(ref)
        decisions = store.decisions(ref)
        # A model trained elsewhere has a source stage where a trained one has its train stage.
        stages = [SOURCE_STAGE if stage == "train" and record.get(SOURCE_STAGE) else stage for stage in STAGES]
        refs = {stage: store.finalized_stage_ref(ref, stage) for stage in stages}
        manifests = {stage: store.read_manifest(stage_ref) for stage, stage_ref in refs.items()}
    except ArtifactError as exc:
        raise CannotBundle(f"cannot bundle {label}: {exc}") from exc
    evaluated = manifests["evaluate"]["metrics"]
    runtimes = tuple(evaluated.get("runtimes") or MODELS_BEFORE_MULTI_RUNTIME)
    unknown = [runtime for runtime in runtimes if runtime not in KNOWN_RUNTIMES]
    if unknown:
        raise CannotBundle(f"cannot bundle {label}: it was gated on {', '.join(unknown)}, which this quantgate cannot "
                           f"package (it packages {', '.join(KNOWN_RUNTIMES)}); upgrade quantgate")
    return VersionSources(
        store=store, ref=ref, record=record, verdict=why,
        gate=decisions[-1]["gate"] if decisions else record.get("gate", {}),
        decision=decisions[-1].get("decision") if decisions else None,
        manifests=manifests,
        folders={stage: Path(stage_ref.path) for stage, stage_ref in refs.items()},
        runtimes=runtimes,
    )
