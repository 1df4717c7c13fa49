"""An OCR system run on pages in one runtime, as PaddleOCR's predict_system runs it, and timed page by page.

A page goes: detector (DetResizeForTest onto the fixed canvas, the DB map, boxes) -> boxes filtered and put in
reading order -> each box cut straight (`crops.crop_line`), turned by 180 degrees when the direction classifier
says so -> read by the recognizer (greedy CTC) -> lines whose confidence is below `drop_score` dropped.

Every model runs at batch 1 with static input shapes (detector [1, 3, H, W] canvas, classifier [1, 3, 48, 192],
recognizer [1, C, H, W]): each crop is classified and read on its own, so the latency is that of a page served
alone, the figure a deployment answering one request at a time sees. PaddleOCR batches crops (6 at a time) and
widens the recognizer's input to the batch's widest crop; here a crop wider than the recognizer's input is
squeezed to it, as the recognizer was gated, and the squeezed crops are counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from quantgate.config import TransformsConfig
from quantgate.ocr.combos import CLASSIFIER, DETECTOR, RECOGNIZER, check_combo, combo_name
from quantgate.ocr.crops import crop_line, reading_order, rec_width
from quantgate.ocr.reads import LineRead, PageRead
from quantgate.progress import Progress
from quantgate.runtimes.forms import ModelForm, Runner, check_runtimes, model_forms, open_runner
from quantgate.samples.image_folders import preprocess
from quantgate.samples.text_reading import line_pixels
from quantgate.tasks.db_postprocess import DBParams, boxes_from_map
from quantgate.tasks.det_resize import PageTooLarge, det_resize_shape, page_input
from quantgate.tasks.text import BLANK, greedy_decode

log = logging.getLogger(__name__)

DROP_SCORE = 0.5  # PaddleOCR's drop_score: a read line less confident than this is left out
MIN_BOX_SIDE_PX = 3  # PaddleOCR's filter_tag_det_res drops boxes whose straightened side is this or less
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class ModelFiles:
    """One component's FP32 and INT8 models: ONNX files for onnxruntime and OpenVINO, Paddle inference program
    folders for paddle_inference (only needed there; the export stage's model.pdmodel / model.pdiparams, as
    `forms.ModelForm.files` names them)."""

    fp32_onnx: Path
    int8_onnx: Path
    fp32_paddle_dir: Path | None = None
    int8_paddle_dir: Path | None = None

    def form(self, runtime: str, precision: str) -> ModelForm:
        """The model `runtime` runs for `precision` ("fp32" or "int8").

        Raises:
            RuntimeUnavailable: an unknown runtime, or paddle_inference without the program folders.
        """
        return model_forms((runtime,), self.fp32_onnx, self.int8_onnx, self.fp32_paddle_dir,
                           self.int8_paddle_dir)[runtime][precision]


@dataclass(frozen=True)
class DetectorSpec:
    """A DB text detector and how a page becomes its input and its map becomes boxes (`det_resize`,
    `db_postprocess`); `mean` and `std` in the model's channel order (`color`)."""

    models: ModelFiles
    canvas: tuple[int, int] = (960, 960)  # (H, W) of the static input every page is padded to
    limit_side_len: int = 960
    limit_type: str = "max"
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    color: str = "bgr"
    params: DBParams = field(default_factory=DBParams)

    def form(self, runtime: str, precision: str) -> ModelForm:
        return self.models.form(runtime, precision)

    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, 3, *self.canvas)


@dataclass(frozen=True)
class ClassifierSpec:
    """A text direction classifier (PaddleOCR's cls): a crop is turned by 180 degrees when the label
    `flip_label` wins with a score above `thresh` (PaddleOCR's cls_thresh)."""

    models: ModelFiles
    transforms: TransformsConfig  # with resize_pad (PaddleOCR: [48, 192]), as the classifier was gated
    labels: tuple[str, ...] = ("0", "180")  # in the model's output order
    thresh: float = 0.9
    flip_label: str = "180"
    outputs_are_probabilities: bool = True  # softmax outputs (PaddleOCR's); False: logits, softmaxed here

    def __post_init__(self) -> None:
        if self.transforms.resize_pad is None:
            raise ValueError("the direction classifier's transforms need resize_pad (PaddleOCR's cls reads "
                             "[48, 192]): set transforms.resize_pad")
        if self.flip_label not in self.labels:
            raise ValueError(f"flip_label {self.flip_label!r} is not one of the classifier's labels {self.labels}")

    def form(self, runtime: str, precision: str) -> ModelForm:
        return self.models.form(runtime, precision)

    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, 1 if self.transforms.color == "grayscale" else 3, *self.transforms.resize_pad)


@dataclass(frozen=True)
class RecognizerSpec:
    """A CTC text recognizer: index 0 of its outputs is the blank, character i of `characters` is index i + 1
    (PaddleOCR with use_space_char: the dictionary, then " ")."""

    models: ModelFiles
    transforms: TransformsConfig  # rec_image_shape, color, mean, std, line_padding, as it was gated
    characters: tuple[str, ...]
    outputs_are_probabilities: bool = True  # PP-OCRv4 ends in softmax; False: logits, softmaxed for the scores

    def __post_init__(self) -> None:
        if not self.characters:
            raise ValueError("the recognizer needs its characters (the dictionary, without the CTC blank)")

    def form(self, runtime: str, precision: str) -> ModelForm:
        return self.models.form(runtime, precision)

    def input_shape(self) -> tuple[int, int, int, int]:
        return (1, *self.transforms.rec_image_shape)


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def line_confidence(probabilities: np.ndarray) -> float:
    """PaddleOCR's CTCLabelDecode score of one [T, C] sequence: the mean of each kept step's highest probability,
    over the steps greedy decoding keeps (not blank, not a repeat of the step before); 0 when none is kept."""
    best = probabilities.argmax(axis=-1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    keep &= best != BLANK
    return float(probabilities.max(axis=-1)[keep].mean()) if keep.any() else 0.0


def kept_boxes(found: Sequence[tuple[np.ndarray, float]], height: int, width: int) -> list[np.ndarray]:
    """PaddleOCR's filter_tag_det_res: corners clipped to the page's last pixel, boxes whose top edge or left
    edge is MIN_BOX_SIDE_PX or shorter dropped."""
    kept = []
    for points, _ in found:
        box = np.asarray(points, np.float32).copy()
        box[:, 0] = np.clip(box[:, 0], 0, width - 1)
        box[:, 1] = np.clip(box[:, 1], 0, height - 1)
        if int(np.linalg.norm(box[0] - box[1])) <= MIN_BOX_SIDE_PX or \
                int(np.linalg.norm(box[0] - box[3])) <= MIN_BOX_SIDE_PX:
            continue
        kept.append(box)
    return kept


class SystemModels:
    """The models of one system's components in one runtime, each (component, precision) opened once and warmed
    up with one zero input, so systems sharing a component's precision share its runner."""

    def __init__(self, runtime: str, detector: DetectorSpec, classifier: ClassifierSpec | None,
                 recognizer: RecognizerSpec, threads: int):
        check_runtimes((runtime,))
        self.runtime, self.threads = runtime, threads
        self.specs = {DETECTOR: detector, CLASSIFIER: classifier, RECOGNIZER: recognizer}
        self.opened: dict[tuple[str, str], Runner] = {}

    def runner(self, component: str, precision: str) -> Runner:
        key = (component, precision)
        if key not in self.opened:
            spec = self.specs[component]
            shape = spec.input_shape()
            run = open_runner(self.runtime, spec.form(self.runtime, precision), self.threads, shape)
            run(np.zeros(shape, np.float32))  # first calls allocate and pick kernels: keep them out of page times
            self.opened[key] = run
        return self.opened[key]


class SystemRunner:
    """One OCR system (each component in its precision) in one runtime; `read(page)` reads a page.

    Models run at batch 1 and crops are classified and read one at a time: the per-page latency of a page
    served alone (see the module docstring). `models` shares opened runners between systems; without it the
    system opens its own.

    Raises:
        ValueError: `precisions` does not give each component "fp32" or "int8", threads < 1, drop_score outside
            [0, 1], or `models` opened for another runtime (all problems named together).
        RuntimeUnavailable: the runtime is unknown or not installed, or paddle_inference lacks program folders.
    """

    def __init__(self, runtime: str, detector: DetectorSpec, classifier: ClassifierSpec | None,
                 recognizer: RecognizerSpec, precisions: Mapping[str, str], threads: int,
                 drop_score: float = DROP_SCORE, models: SystemModels | None = None):
        problems = check_combo(precisions, classifier is not None)
        if threads < 1:
            problems.append(f"threads must be at least 1, got {threads}")
        if not 0.0 <= drop_score <= 1.0:
            problems.append(f"drop_score is a probability in [0, 1], got {drop_score}")
        if models is not None and models.runtime != runtime:
            problems.append(f"the shared models run in {models.runtime}, not {runtime}")
        if problems:
            raise ValueError(f"cannot run the OCR system {dict(precisions)}: " + "; ".join(problems))
        self.models = models or SystemModels(runtime, detector, classifier, recognizer, threads)
        self.detector, self.classifier, self.recognizer = detector, classifier, recognizer
        self.precisions, self.drop_score = dict(precisions), drop_score
        self.name = combo_name(precisions)
        self.detect = self.models.runner(DETECTOR, precisions[DETECTOR])
        self.classify = self.models.runner(CLASSIFIER, precisions[CLASSIFIER]) if classifier else None
        self.recognize = self.models.runner(RECOGNIZER, precisions[RECOGNIZER])

    def read(self, page_rgb: np.ndarray) -> PageRead:
        """The lines of one RGB uint8 page [H, W, 3] in reading order, and the page's timings.

        Raises:
            PageTooLarge: the resized page does not fit the detector's canvas.
            ValueError: the page is not an [H, W, 3] image.
        """
        started = time.perf_counter()
        found = self._detect(page_rgb)
        boxes = [found[i] for i in reading_order(found)]
        detected = time.perf_counter()
        crops, flipped = self._crops(page_rgb, boxes)
        cropped = time.perf_counter()
        lines, squeezed = [], 0
        for box, crop, turned in zip(boxes, crops, flipped):
            text, score, wide = self._recognize(crop)
            squeezed += wide
            lines.append(LineRead(np.rint(box).astype(np.int64), text, score, turned))
        read = time.perf_counter()
        kept = tuple(line for line in lines if line.score >= self.drop_score)
        finished = time.perf_counter()
        return PageRead(lines=kept, detection_ms=(detected - started) * 1e3, crops_ms=(cropped - detected) * 1e3,
                        recognition_ms=(read - cropped) * 1e3, total_ms=(finished - started) * 1e3,
                        boxes=len(boxes), squeezed=squeezed, flipped=sum(flipped), dropped=len(lines) - len(kept))

    def _detect(self, page_rgb: np.ndarray) -> list[np.ndarray]:
        spec = self.detector
        canvas, geometry = page_input(page_rgb, spec.canvas, spec.limit_side_len, spec.limit_type, spec.mean,
                                      spec.std, spec.color)
        prob = np.asarray(self.detect(canvas[None]))
        return kept_boxes(boxes_from_map(prob[0, 0], geometry, spec.params), *page_rgb.shape[:2])

    def _crops(self, page_rgb: np.ndarray, boxes: list[np.ndarray]) -> tuple[list[np.ndarray], list[bool]]:
        """Each box cut straight, and turned by 180 degrees where the classifier is sure it is upside down."""
        crops, flipped = [crop_line(page_rgb, box) for box in boxes], [False] * len(boxes)
        if self.classify is None:
            return crops, flipped
        spec = self.classifier
        flip = spec.labels.index(spec.flip_label)
        for index, crop in enumerate(crops):
            scores = np.asarray(self.classify(preprocess(Image.fromarray(crop), spec.transforms)[None]))[0]
            scores = scores if spec.outputs_are_probabilities else _softmax(scores)
            if int(scores.argmax()) == flip and float(scores[flip]) > spec.thresh:
                crops[index], flipped[index] = np.ascontiguousarray(crop[::-1, ::-1]), True
        return crops, flipped

    def _recognize(self, crop: np.ndarray) -> tuple[str, float, bool]:
        """A crop's text, its confidence, and whether it was squeezed to the recognizer's width."""
        spec = self.recognizer
        shape = tuple(spec.transforms.rec_image_shape)
        _, squeezed = rec_width(crop.shape[0], crop.shape[1], shape)
        outputs = np.asarray(self.recognize(line_pixels(Image.fromarray(crop), shape, spec.transforms)[None]))
        probabilities = outputs[0] if spec.outputs_are_probabilities else _softmax(outputs[0])
        return str(greedy_decode(outputs, spec.characters)[0]), line_confidence(probabilities), squeezed


def check_pages(pages: Sequence[np.ndarray], detector: DetectorSpec) -> None:
    """Fail before any model is opened when a page is not an RGB image or will not fit the detector's canvas.

    Raises:
        PageTooLarge: pages that resize beyond the canvas (all of them named).
        ValueError: no pages, or pages that are not [H, W, 3] uint8 images.
    """
    if not pages:
        raise ValueError("no pages to read: pass at least one [H, W, 3] RGB page")
    malformed = [f"page {i} {np.asarray(page).dtype} {np.asarray(page).shape}" for i, page in enumerate(pages)
                 if np.asarray(page).dtype != np.uint8 or np.asarray(page).ndim != 3 or np.asarray(page).shape[2] != 3]
    if malformed:
        raise ValueError(f"pages must be [H, W, 3] uint8 RGB images: {'; '.join(malformed[:5])}")
    too_large = []
    for index, page in enumerate(pages):
        resized = det_resize_shape(*page.shape[:2], detector.limit_side_len, detector.limit_type)
        if resized[0] > detector.canvas[0] or resized[1] > detector.canvas[1]:
            too_large.append(f"page {index} ({page.shape[0]}x{page.shape[1]} -> {resized[0]}x{resized[1]})")
    if too_large:
        raise PageTooLarge(f"{len(too_large)} page(s) resize beyond the detector's {detector.canvas[0]}x"
                           f"{detector.canvas[1]} canvas (limit_side_len {detector.limit_side_len}, limit_type "
                           f"{detector.limit_type!r}): {', '.join(too_large[:5])}; lower limit_side_len or "
                           "enlarge the canvas")


def run_systems(pages: Sequence[np.ndarray], runtime: str, detector: DetectorSpec,
                classifier: ClassifierSpec | None, recognizer: RecognizerSpec, combos: Sequence[Mapping[str, str]],
                threads: int, drop_score: float = DROP_SCORE) -> dict[str, list[PageRead]]:
    """Every system of `combos` on every page in `runtime`: {combination name: [PageRead per page]}.

    Each (component, precision) model is opened once and shared by the systems that use it. Systems run one
    after another, each over all pages (a block per system, as the evaluate stage times models: interleaving
    would time one system while another's worker threads still spin on the cores). Progress is logged every
    few seconds.

    Raises:
        ValueError: no pages or combinations, a malformed page, or a combination that is not one precision per
            component (every problem of every combination named).
        PageTooLarge: a page will not fit the detector's canvas.
        RuntimeUnavailable: the runtime is unknown or not installed, or paddle_inference lacks program folders.
    """
    if not combos:
        raise ValueError("no systems to run: pass combos, e.g. all_combos(classifier is not None)")
    problems = [f"{dict(combo)}: {problem}" for combo in combos for problem in check_combo(combo, classifier is
                                                                                              not None)]
    if problems:
        raise ValueError("cannot run these OCR systems: " + "; ".join(problems))
    names = [combo_name(combo) for combo in combos]
    if len(set(names)) != len(names):
        raise ValueError(f"the systems {names} name one combination more than once: give each once")
    check_pages(pages, detector)
    models = SystemModels(runtime, detector, classifier, recognizer, threads)
    systems = [SystemRunner(runtime, detector, classifier, recognizer, combo, threads, drop_score, models)
               for combo in combos]
    log.info("OCR systems in %s: %d system(s) x %d page(s), %d models (%s)", runtime, len(systems), len(pages),
             len(models.opened), ", ".join(f"{part} {precision}" for part, precision in models.opened))
    progress = Progress(log, f"OCR systems ({runtime})", len(systems) * len(pages), PROGRESS_EVERY_S)
    reads: dict[str, list[PageRead]] = {}
    for number, system in enumerate(systems):
        reads[system.name] = []
        for index, page in enumerate(pages):
            reads[system.name].append(system.read(np.asarray(page)))
            progress.step(number * len(pages) + index + 1, system.name)
    return reads

