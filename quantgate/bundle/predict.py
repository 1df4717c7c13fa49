"""Predicting with a verified bundle: decode images, apply its preprocessing record, run one runtime's
model, and rank the classes by probability (softmax of the logits, or the model's own softmax output), or, for a text recognizer, decode
each line greedily (CTC) with the bundle's dictionary.

The images go through the same decoding and `preprocess` the data stage used for training and for
the gate's test split, so a bundle fed the test split's files reproduces the stored predictions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantgate.bundle.engines import load_engine
from quantgate.bundle.latencies import gate_verdicts, pick_runtime
from quantgate.bundle.layout import MODEL_CARD_JSON, PRECISIONS, RUNTIMES_NOT_APPLICABLE, TEXT_RECOGNITION
from quantgate.bundle.verify import VerifiedBundle
from quantgate.config import TransformsConfig
from quantgate.errors import BadInput
from quantgate.int8.weight_range import onnxruntime_weight_bits
from quantgate.runtimes.cpu import cpu_record
from quantgate.tasks.text import TextRecognition

DEFAULT_BATCH = 64


class BadImage(BadInput):
    """An image given to predict cannot be read, or does not become the model's input shape (exit 2)."""


class NotInBundle(BadInput):
    """The runtime or precision asked for is not one the bundle holds (exit 2)."""


@dataclass(frozen=True)
class RankedClass:
    index: int
    name: str
    probability: float


@dataclass(frozen=True)
class Prediction:
    image: str
    top: tuple[RankedClass, ...]  # classification; empty for a text recognizer
    text: str | None = None  # text recognition: the decoded line


def choose_runtime(bundle: VerifiedBundle, runtime: str | None, precision: str) -> str:
    """`runtime`, which must be in the bundle and must not have failed the gate; without one, the fastest of the
    bundle's runtimes that passed the gate and are installed here (`latencies.pick_runtime`).

    Raises:
        NotInBundle: the runtime or precision is not one the bundle holds (for a runtime the evaluation found not
            applicable to the model, the reason is named), or the gate did not pass that runtime.
        RuntimeMissing: no runtime is named and none of those that passed the gate is installed here.
    """
    if precision not in PRECISIONS:
        raise NotInBundle(f"precision {precision!r} is not one a bundle holds; choose {' or '.join(PRECISIONS)}")
    if runtime is None:
        return pick_runtime(bundle, precision).runtime
    why_not = (bundle.manifest.get(RUNTIMES_NOT_APPLICABLE) or {}).get(runtime)
    if runtime not in bundle.runtimes and why_not:
        raise NotInBundle(f"bundle {bundle.label} holds no {runtime} model: {runtime} is not applicable to this "
                          f"model ({why_not}); choose one of {', '.join(bundle.runtimes)} with --runtime, or leave "
                          "--runtime out")
    if runtime not in bundle.runtimes:
        raise NotInBundle(f"bundle {bundle.root} holds no {runtime} model (it holds {', '.join(bundle.runtimes)}); "
                          "choose one of those with --runtime")
    verdict = (gate_verdicts(bundle.manifest) or {}).get(runtime)
    if isinstance(verdict, dict) and verdict.get("passed") is not True:
        passed = [name for name, each in (gate_verdicts(bundle.manifest) or {}).items()
                  if name in bundle.runtimes and isinstance(each, dict) and each.get("passed") is True]
        failed = verdict.get("failed") or []
        why = f"failed {', '.join(failed)}" if failed else "its recorded verdict is not a pass"
        raise NotInBundle(f"bundle {bundle.label}'s gate did not pass runtime {runtime} ({why}); choose one it "
                          f"passed with --runtime ({', '.join(passed) or 'none'}), or leave --runtime out")
    return runtime


def weight_bits_note(bundle: VerifiedBundle, runtime: str, precision: str) -> str | None:
    """A warning when onnxruntime's INT8 model has 8-bit weights and this CPU's INT8 kernels saturate with them
    (`int8.weight_range`): the gate measured it on a CPU that sums in 32 bits, and this one computes otherwise."""
    if runtime != "onnxruntime" or precision != "int8" or MODEL_CARD_JSON not in bundle.manifest["files"]:
        return None
    quantization = bundle.read_json(MODEL_CARD_JSON).get("quantization") or {}
    here = onnxruntime_weight_bits(cpu_record()["flags"])
    if quantization.get("int8_weight_bits", 8) <= here.bits:
        return None
    return (f"note: the INT8 model has {quantization.get('int8_weight_bits', 8)}-bit weights, but {here.why}: "
            f"its results here may differ from the gated ones; bundle a version converted on a CPU like this one, "
            f"or predict with --precision fp32")


def predict_images(bundle: VerifiedBundle, images: Sequence[str], runtime: str | None = None,
                   precision: str = "int8", top_k: int = 3) -> list[Prediction]:
    """The `top_k` classes of each image, most probable first, from `runtime`'s `precision` model (no runtime: the
    one `choose_runtime` picks); for a text recognizer, each image's decoded line (greedy CTC: repeats merged, blanks
    dropped), as evaluated.

    The batch size and thread count are those the evaluate stage ran the models with.

    Raises:
        NotInBundle: see choose_runtime.
        BadImage: an image is missing, cannot be decoded, or does not preprocess to the model's input shape.
        RuntimeMissing: the runtime's library is not installed.
    """
    runtime = choose_runtime(bundle, runtime, precision)
    text = bundle.task == TEXT_RECOGNITION
    decoder = TextRecognition(bundle.characters()) if text else None
    classes = [] if text else bundle.classes()
    record = bundle.preprocessing()
    transforms = TransformsConfig.model_validate(record["transforms"])
    input_shape = tuple(record["input_shape"])
    settings = bundle.manifest.get("evaluated_with") or {}
    batch_size, threads = int(settings.get("batch_size") or DEFAULT_BATCH), int(settings.get("threads") or 1)
    engine = load_engine(runtime, bundle.model_files(runtime, precision), precision, threads,
                         (batch_size, *input_shape))
    predictions = []
    for names, batch in _batches(images, transforms, input_shape, batch_size, text):
        if decoder is not None:
            lines = decoder.predict(engine(batch))
            predictions += [Prediction(name, (), str(line)) for name, line in zip(names, lines)]
            continue
        logits = np.asarray(engine(batch), dtype=np.float64)
        # Ranked by logit, stably, so the first is exactly the argmax the evaluate stage stored.
        order = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
        if bundle.manifest.get("outputs") == "probabilities":  # the model ends in softmax (trained elsewhere)
            probabilities = logits
        else:
            shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
            probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        for row, name in enumerate(names):
            top = tuple(RankedClass(int(k), classes[k], float(probabilities[row, k])) for k in order[row])
            predictions.append(Prediction(name, top))
    return predictions


def _batches(images: Sequence[str], transforms: TransformsConfig, input_shape: tuple[int, ...],
             batch_size: int, text: bool = False) -> Iterator[tuple[list[str], np.ndarray]]:
    """The images decoded and preprocessed, `batch_size` at a time, so memory holds one batch."""
    for start in range(0, len(images), batch_size):
        names = [str(image) for image in images[start:start + batch_size]]
        yield names, np.stack([load_image(Path(name), transforms, input_shape, text) for name in names])


def load_image(path: Path, transforms: TransformsConfig, input_shape: tuple[int, ...],
               text: bool = False) -> np.ndarray:
    """One image as the model's float32 CHW input, decoded and transformed as the data stage does (a text
    line: resized to the recognizer's height, padded to its width).

    Raises:
        BadImage: the file is missing, cannot be decoded, or becomes another shape than `input_shape`.
    """
    from PIL import Image

    from quantgate.samples.file_hashes import DECODE_ERRORS
    from quantgate.samples.image_folders import preprocess
    from quantgate.samples.text_reading import line_pixels

    if not path.is_file():
        raise BadImage(f"image {path} {'is not a file' if path.exists() else 'does not exist'}; pass image files")
    try:
        with Image.open(path) as image:
            image.load()
            image = image.convert("L" if transforms.color == "grayscale" else "RGB")
    except DECODE_ERRORS as exc:
        raise BadImage(f"image {path} cannot be decoded ({type(exc).__name__}: {exc}); pass a PNG, JPEG or BMP "
                       "file") from exc
    pixels = line_pixels(image, input_shape, transforms) if text else preprocess(image, transforms)
    if pixels.shape != input_shape:
        raise BadImage(f"image {path} becomes shape {list(pixels.shape)} after the bundle's preprocessing, but the "
                       f"model takes {list(input_shape)}: the recorded transforms do not fix the size "
                       f"({transforms.model_dump(mode='json')}); resize the image to {list(input_shape[1:])} first")
    return pixels
