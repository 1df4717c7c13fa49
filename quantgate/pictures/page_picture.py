"""Pictures for the report of where the INT8 system read a page differently from the FP32 one.

A page picture shows the page with both systems' boxes (FP32 solid blue, INT8 dashed orange) and the ground-truth
lines they read differently filled in translucent red and numbered; a panel on its right lists, per such line, the
truth and both readings. Those strings may be Chinese: the caller picks the font with the report's
`stages.report.fonts.choose_font(picture_strings(...))` and passes its `path`; with no font (None: no installed
font has the characters) the panel names each line's number and which system was right, and the report's table
shows the strings. Line crops (save_crops) let the report show what the recognizer was given.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from quantgate.ocr.crops import crop_line
from quantgate.pictures.fonts import pil_face
from quantgate.ocr.matching import ReadLine, match_lines

ChannelOrder = Literal["RGB", "BGR"]

FP32_COLOUR, INT8_COLOUR = (31, 119, 180), (255, 127, 14)
DIFFER_COLOUR, DIFFER_FILL = (200, 20, 20), (230, 30, 30, 110)  # fill alpha 110/255: the text stays legible
TEXT_COLOUR, PAPER = (30, 30, 30), (255, 255, 255)
PANEL_WIDTH = 520  # px right of the page, whatever the page's size, so pictures line up in the report
MAX_PAGE_SIDE = 1600  # larger pages are shrunk: a 4000 px scan would make a report nobody can scroll
TEXT_PX, LINE_PX, MARGIN_PX = 16, 22, 12
BOX_PX, DASH_PX, GAP_PX = 2, 7, 4


def _rgb(page: np.ndarray, order: ChannelOrder) -> np.ndarray:
    page = np.asarray(page)
    if page.dtype != np.uint8 or page.ndim != 3 or page.shape[2] != 3 or min(page.shape[:2]) == 0:
        raise ValueError(f"a page is an [H, W, 3] uint8 image; got dtype {page.dtype} and shape {page.shape}")
    if order not in ("RGB", "BGR"):
        raise ValueError(f"order is 'RGB' or 'BGR' (cv2.imread gives BGR); got {order!r}")
    return np.ascontiguousarray(page[..., ::-1] if order == "BGR" else page)  # cv2 refuses reversed strides


def _save_png(image: Image.Image, out: Path) -> Path:
    """Written under a temporary name in `out`'s folder, then renamed: a reader never sees half a picture."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{out.stem}-", suffix=".png", dir=out.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            image.save(stream, format="PNG")
        os.replace(temporary, out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return out


def _check_differing(differing: set[int], gt: Sequence[dict]) -> None:
    wrong = sorted(line for line in differing if not 0 <= line < len(gt))
    if wrong:
        raise ValueError(f"differing lines {wrong} are not ground-truth lines of this page (it has {len(gt)})")


def _outcome(reading: str | None, truth: str) -> str:
    return "missed" if reading is None else "right" if reading == truth else "wrong"


def picture_strings(gt: Sequence[dict], fp32_read: Sequence[ReadLine], int8_read: Sequence[ReadLine],
                    differing: set[int]) -> list[str]:
    """Every string draw_page would draw for these lines: what a font must cover (fonts.choose_font).

    Raises:
        ValueError: a line is malformed, or a differing index is not a ground-truth line.
    """
    _check_differing(differing, gt)
    fp32, int8 = match_lines(gt, fp32_read).readings, match_lines(gt, int8_read).readings
    return [text for line in sorted(differing) for text in (gt[line]["transcription"], fp32[line], int8[line])
            if text] + ["(missed)"]


def _fit(draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    """`text` cut short with "..." to fit `width` pixels: a long line must not run off the picture."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def _dashed(draw: ImageDraw.ImageDraw, corners: list[tuple[float, float]], colour: tuple[int, int, int]) -> None:
    # Dashed so that an INT8 box drawn over an identical FP32 box leaves the blue showing between its dashes.
    for (x0, y0), (x1, y1) in zip(corners, corners[1:] + corners[:1]):
        length = math.hypot(x1 - x0, y1 - y0)
        start = 0.0
        while start < length:
            end = min(start + DASH_PX, length)
            draw.line([(x0 + (x1 - x0) * start / length, y0 + (y1 - y0) * start / length),
                       (x0 + (x1 - x0) * end / length, y0 + (y1 - y0) * end / length)], fill=colour, width=BOX_PX)
            start += DASH_PX + GAP_PX


def _corners(points: np.ndarray | Sequence, scale: float) -> list[tuple[float, float]]:
    return [(float(x) * scale, float(y) * scale) for x, y in np.asarray(points, dtype=np.float64).reshape(-1, 2)]


def _draw_boxes(canvas: Image.Image, scale: float, highlighted: list, fp32_read: Sequence[ReadLine],
                int8_read: Sequence[ReadLine], numbers: list[int]) -> Image.Image:
    """The differing lines filled and numbered, then both systems' boxes over them: the fill must not hide a box."""
    fill = Image.new("RGBA", canvas.size, (0, 0, 0, 0))
    for points in highlighted:
        ImageDraw.Draw(fill).polygon(_corners(points, scale), fill=DIFFER_FILL)
    canvas = Image.alpha_composite(canvas, fill)
    draw = ImageDraw.Draw(canvas)
    for points, _ in fp32_read:
        draw.polygon(_corners(points, scale), outline=FP32_COLOUR, width=BOX_PX)
    for points, _ in int8_read:
        _dashed(draw, _corners(points, scale), INT8_COLOUR)
    labels = ImageFont.load_default(size=TEXT_PX)
    for points, number in zip(highlighted, numbers):
        corners = _corners(points, scale)
        x, y = min(x for x, _ in corners), min(y for _, y in corners)
        top = max(0.0, y - LINE_PX)  # above the line, on white: over it the number would hide what was misread
        draw.rectangle([x, top, x + draw.textlength(str(number), font=labels) + 4, top + LINE_PX - 2], fill=PAPER)
        draw.text((x + 2, top), str(number), fill=DIFFER_COLOUR, font=labels)
    return canvas


def _draw_panel(draw: ImageDraw.ImageDraw, left: int, font: ImageFont.FreeTypeFont | None,
                rows: list[tuple[int, str, str | None, str | None]]) -> None:
    """The legend and, per differing line (number, truth, FP32 text, INT8 text), its strings in `font`, or without
    a font which system was right."""
    labels = ImageFont.load_default(size=TEXT_PX)  # numbers and ASCII words: Pillow's own font has them
    left, y, room = left + MARGIN_PX, MARGIN_PX, PANEL_WIDTH - 2 * MARGIN_PX
    for text, colour in (("FP32 boxes: solid", FP32_COLOUR), ("INT8 boxes: dashed", INT8_COLOUR),
                         (f"Lines read differently: {len(rows)}", DIFFER_COLOUR)):
        draw.text((left, y), text, fill=colour, font=labels)
        y += LINE_PX
    y += LINE_PX
    for number, truth, fp32, int8 in rows:
        if font is None:
            said = f"#{number}  FP32 {_outcome(fp32, truth)}, INT8 {_outcome(int8, truth)}"
            draw.text((left, y), _fit(draw, said, labels, room), fill=TEXT_COLOUR, font=labels)
            y += LINE_PX
            continue
        draw.text((left, y), f"#{number}", fill=DIFFER_COLOUR, font=labels)
        for name, text, colour in (("truth", truth, TEXT_COLOUR), ("FP32", fp32, FP32_COLOUR),
                                   ("INT8", int8, INT8_COLOUR)):
            draw.text((left + 48, y), name, fill=colour, font=labels)
            draw.text((left + 100, y), _fit(draw, "(missed)" if text is None else text, font, room - 100),
                      fill=colour, font=font)
            y += LINE_PX
        y += 8


def draw_page(page: np.ndarray, gt: Sequence[dict], fp32_read: Sequence[ReadLine], int8_read: Sequence[ReadLine],
              differing: set[int], out: Path, font_path: str | None, *, order: ChannelOrder = "RGB") -> Path:
    """A PNG at `out`: the page (shrunk to MAX_PAGE_SIDE at most) with both systems' boxes and the `differing`
    ground-truth lines highlighted and numbered by their index in `gt`, and a PANEL_WIDTH panel on the right
    listing those lines (truth, FP32 and INT8 readings drawn with `font_path`; without one, the line numbers and
    which system was right). The picture is as tall as the page or the panel, whichever is taller.

    Raises:
        ValueError: the page is not an [H, W, 3] uint8 image, a line is malformed, or a differing index is not a
            ground-truth line.
    """
    rgb = _rgb(page, order)
    _check_differing(differing, gt)
    fp32, int8 = match_lines(gt, fp32_read).readings, match_lines(gt, int8_read).readings
    rows = sorted(differing)
    font = pil_face(font_path, TEXT_PX) if font_path else None

    scale = min(1.0, MAX_PAGE_SIDE / max(rgb.shape[:2]))
    shown = Image.fromarray(rgb)
    if scale < 1.0:
        shown = shown.resize((max(1, round(rgb.shape[1] * scale)), max(1, round(rgb.shape[0] * scale))),
                             Image.Resampling.LANCZOS)
    row_px = 3 * LINE_PX + 8 if font else LINE_PX
    panel_px = 2 * MARGIN_PX + 4 * LINE_PX + len(rows) * row_px
    canvas = Image.new("RGBA", (shown.width + PANEL_WIDTH, max(shown.height, panel_px)), PAPER + (255,))
    canvas.paste(shown, (0, 0))
    canvas = _draw_boxes(canvas, scale, [gt[line]["points"] for line in rows], fp32_read, int8_read, rows)
    _draw_panel(ImageDraw.Draw(canvas), shown.width, font,
                [(line, gt[line]["transcription"], fp32[line], int8[line]) for line in rows])
    return _save_png(canvas.convert("RGB"), out)


def save_crops(page: np.ndarray, lines: Sequence[tuple[str, np.ndarray | Sequence]], out_dir: Path, *,
               order: ChannelOrder = "RGB") -> list[Path]:
    """Each line's straightened crop (crop_line, as the recognizer got it) as out_dir/<name>.png, in order.

    Raises:
        ValueError: the page is not an [H, W, 3] uint8 image, a box cannot be cropped, or a name is not a plain
            file name or appears twice.
    """
    rgb = _rgb(page, order)
    names = [name for name, _ in lines]
    bad = [name for name in names if not name or Path(name).name != name or name in (".", "..")]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"crop names must be distinct plain file names (no folders); got {names!r}")
    return [_save_png(Image.fromarray(crop_line(rgb, points)), Path(out_dir) / f"{name}.png")
            for name, points in lines]
