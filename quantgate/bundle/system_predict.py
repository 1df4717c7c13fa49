"""Reading pages with an OCR system's bundle: detector -> boxes in reading order -> straightened crops -> (direction
classifier) -> recognizer, through the system engine (`quantgate/ocr/engine.py`) the system's evaluation ran.

The components' specs are built by the same functions the system's evaluation builds them with
(`stages/system/evaluate.py`), from the bundle's copies of what they read there: each component's preprocessing
record (transforms, DB post-processing), classes and characters, and its convert-stage FP32 and INT8 ONNX models.
Every component runs in one precision (`--precision`), at batch 1, with the evaluation's thread count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quantgate.bundle.layout import CLASSIFIER, DETECTOR, RECOGNIZER
from quantgate.bundle.pages import check_page_fits, read_page
from quantgate.bundle.predict import NotInBundle, choose_runtime
from quantgate.bundle.verify import BundleInvalid, VerifiedBundle
from quantgate.config import TransformsConfig
from quantgate.stages.convert.outputs import FP32_FILE, INT8_FILE


@dataclass(frozen=True)
class ReadLine:
    points: tuple[tuple[int, int], ...]  # 4 (x, y) corners in page pixels, clockwise from the top-left
    text: str
    score: float  # the recognizer's confidence (PaddleOCR's rec score)
    flipped: bool  # the direction classifier turned the crop by 180 degrees


@dataclass(frozen=True)
class PageText:
    image: str
    lines: tuple[ReadLine, ...]  # in reading order, those at least drop_score confident
    boxes: int  # boxes the detector kept
    dropped: int  # lines read less confidently than drop_score, left out


def _component(bundle: VerifiedBundle, role: str):
    """The system evaluation's view of component `role`: its record's keys and the folder of its two models."""
    from quantgate.ocr.components import Component

    entry = bundle.component(role)
    if entry is None:
        return None
    folder = Path(entry["models"]["fp32"]).parent
    if entry["models"] != {"fp32": f"{folder.as_posix()}/{FP32_FILE}", "int8": f"{folder.as_posix()}/{INT8_FILE}"}:
        raise BundleInvalid(f"bundle {bundle.root}: the system's {role} models {entry['models']} are not one folder's "
                            f"{FP32_FILE} and {INT8_FILE}; make the bundle again with `quantgate bundle`")
    record = bundle.preprocessing(entry["preprocessing"])
    spec = {"transforms": record["transforms"], "postprocess": record.get("postprocess")}
    if "classes" in entry:
        spec["classes"] = bundle.classes(entry["classes"])
    if "characters" in entry:
        spec["characters"] = list(bundle.characters(entry["characters"]))
    return Component(spec, bundle.root / folder, entry.get("outputs") == "probabilities")


def system_specs(bundle: VerifiedBundle):
    """(DetectorSpec, ClassifierSpec or None, RecognizerSpec) of the bundle's components."""
    from quantgate.ocr.components import classifier_spec, detector_spec, recognizer_spec

    classifier = _component(bundle, CLASSIFIER)
    return (detector_spec(_component(bundle, DETECTOR)),
            classifier_spec(classifier, float(bundle.manifest["cls_thresh"])) if classifier else None,
            recognizer_spec(_component(bundle, RECOGNIZER)))


def read_pages(bundle: VerifiedBundle, images: Sequence[str], runtime: str | None = None,
               precision: str = "int8") -> list[PageText]:
    """Each page's lines in reading order: box, text and confidence, from the system with every component in
    `precision`, in `runtime`.

    Raises:
        NotInBundle: the runtime or precision is not one the bundle holds.
        BadImage: a page is missing, cannot be decoded, or is too large for the detector's canvas.
        RuntimeMissing: the runtime's library is not installed.
    """
    from quantgate.bundle.engines import RuntimeMissing
    from quantgate.ocr.combos import uniform
    from quantgate.ocr.engine import SystemRunner
    from quantgate.runtimes.forms import RuntimeUnavailable

    runtime = choose_runtime(bundle, runtime, precision)
    detector, classifier, recognizer = system_specs(bundle)
    transforms = TransformsConfig.model_validate(bundle.preprocessing(bundle.component(DETECTOR)["preprocessing"])
                                                 ["transforms"])
    pages = []
    for image in images:  # every page is checked before any model is opened
        page = read_page(Path(image))
        check_page_fits(Path(image), page, transforms)
        pages.append((str(image), page))
    threads = int((bundle.manifest.get("evaluated_with") or {}).get("threads") or 1)
    try:
        system = SystemRunner(runtime, detector, classifier, recognizer, uniform(classifier is not None, precision),
                              threads, float(bundle.manifest["drop_score"]))
    except RuntimeUnavailable as exc:
        raise RuntimeMissing(f"{exc}; or choose another of the bundle's runtimes with --runtime") from exc
    except ValueError as exc:
        raise NotInBundle(f"bundle {bundle.root} cannot run its system: {exc}") from exc
    read = []
    for name, page in pages:
        result = system.read(page)
        lines = tuple(ReadLine(tuple(tuple(int(v) for v in point) for point in line.points.tolist()), line.text,
                               float(line.score), bool(line.flipped)) for line in result.lines)
        read.append(PageText(name, lines, result.boxes, result.dropped))
    return read
