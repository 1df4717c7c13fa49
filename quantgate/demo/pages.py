"""Demo pages for text detection: Chinese cheques, invoices and bank slips drawn with their PaddleOCR box labels.

    entries = render_pages(out_dir, 200, seed=0)       # [("pages/0_00000.png", [{"transcription", "points"}])]
    write_demo_dataset(out_dir, 200, seed=0)           # the pages plus calibration.txt and test.txt

`quantgate demo-pages` runs `write_demo_dataset`, so a detector (or the OCR system) can be released without
downloading a dataset. Each page holds 5-12 upright text lines (a title, label/value pairs, table cells) on light
paper with ruled lines, borders and sometimes a faint seal ring; each line's box is measured on the drawn ink,
then widened by BOX_MARGIN_PX, and no two boxes overlap. The longer side stays within 960 px, so pages fit
PaddleOCR's default 960 limit without resizing. The same seed and font give the same bytes and boxes.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from quantgate.demo.text import Cell, DemoError, Row, Table, bank_slip, cheque, cjk_font, invoice
from quantgate.pictures.fonts import pil_face

PAGES_FOLDER = "pages"
CALIBRATION_FILE = "calibration.txt"
TEST_FILE = "test.txt"
WIDTH_PX = (800, 960)  # inclusive ranges; the longer side is at most 960, PaddleOCR's det_limit_side_len
HEIGHT_PX = (400, 700)
LINES_PER_PAGE = (5, 12)
BODY_PX = (20, 30)  # glyph sizes of the form's lines; the title is larger
TITLE_PX = (32, 40)
MIN_PX = 20  # a row too wide at this size is split, or left out
BOX_MARGIN_PX = 3  # paper left around the ink in each box, as annotators draw them
ROW_GAP_PX = (14, 64)  # paper between one row's boxes and the next's: room for a ruled line, spread on short forms
CELL_GAP_PX = (40, 90)  # between boxes on one row: a detector must not join them into one line
CELL_PAD_PX = 10  # paper between a table cell's box and its grid lines


@dataclass(frozen=True)
class Form:
    """A kind of page: what it says and the colours it is printed in (RGB)."""

    content: Callable[[np.random.Generator], tuple[str, list[Row]]]
    paper: tuple[int, int, int]
    rule: tuple[int, int, int]  # borders, ruled lines and table grids
    label_ink: tuple[int, int, int]  # the title, printed labels and table headers
    value_ink: tuple[int, int, int]  # what was filled in


# Cheques are printed on tinted security paper in green, invoices in brown, bank slips in grey with blue values.
FORMS = {
    "cheque": Form(cheque, (236, 246, 240), (110, 160, 140), (40, 90, 70), (25, 25, 35)),
    "invoice": Form(invoice, (252, 250, 244), (175, 120, 90), (120, 65, 35), (20, 20, 20)),
    "slip": Form(bank_slip, (250, 250, 250), (140, 140, 150), (40, 40, 60), (20, 30, 90)),
}


class _Page:
    """One page being drawn: its image, the area inside its border that text may use, and the boxes so far."""

    def __init__(self, rng: np.random.Generator, font: Path, form: Form):
        self.rng, self.font, self.form, self.faces, self.inks = rng, font, form, {}, {}
        self.width = int(rng.integers(WIDTH_PX[0], WIDTH_PX[1] + 1))
        self.height = int(rng.integers(HEIGHT_PX[0], HEIGHT_PX[1] + 1))
        paper = tuple(int(c) for c in np.array(form.paper) - rng.integers(0, 10, 3))
        self.image = Image.new("RGB", (self.width, self.height), paper)
        self.draw = ImageDraw.Draw(self.image)
        inset = int(rng.integers(8, 17))
        self.draw.rectangle((inset, inset, self.width - 1 - inset, self.height - 1 - inset), outline=form.rule,
                            width=int(rng.integers(1, 3)))
        self.left, self.right = inset + int(rng.integers(16, 36)), self.width - inset - int(rng.integers(16, 36))
        self.top, self.bottom = inset + int(rng.integers(10, 24)), self.height - inset - 10
        self.boxes: list[dict] = []

    def face(self, size: int) -> ImageFont.FreeTypeFont:
        if size not in self.faces:
            self.faces[size] = pil_face(self.font, size)
        return self.faces[size]

    def ink(self, text: str, size: int) -> tuple[int, int, int, int]:
        """The drawn ink's extent relative to the text origin: the font's bbox also counts side bearings, which
        would leave uneven paper inside the box (7 px before "￥" at 30 px)."""
        if (text, size) in self.inks:
            return self.inks[text, size]
        left, top, right, bottom = self.face(size).getbbox(text)
        mask = Image.new("L", (right - left + 4, bottom - top + 4), 0)
        ImageDraw.Draw(mask).text((2 - left, 2 - top), text, fill=255, font=self.face(size))
        x0, y0, x1, y1 = mask.getbbox() or (2, 2, 3, 3)
        self.inks[text, size] = x0 - 2 + left, y0 - 2 + top, x1 - 2 + left, y1 - 2 + top
        return self.inks[text, size]

    def put(self, text: str, x: int, y: int, size: int, ink: tuple[int, int, int]) -> None:
        """Draw `text` with its origin at (x, y) and record its box, BOX_MARGIN_PX around the ink."""
        left, top, right, bottom = self.ink(text, size)
        self.draw.text((x, y), text, fill=ink, font=self.face(size))
        m = BOX_MARGIN_PX
        x0, y0, x1, y1 = x + left - m, y + top - m, x + right + m, y + bottom + m
        self.boxes.append({"transcription": text, "points": [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]})

    def line_across(self, y: int) -> None:
        self.draw.line((self.left - 8, y, self.right + 8, y), fill=self.form.rule, width=1)


def _fit(page: _Page, texts: list[str], size: int, room: int, gap: int) -> int | None:
    """The largest size from `size` down to MIN_PX at which `texts`, `gap` apart, fit in `room` pixels."""
    while size >= MIN_PX:
        widths = [page.ink(text, size)[2] - page.ink(text, size)[0] + 2 * BOX_MARGIN_PX for text in texts]
        if sum(widths) + gap * (len(texts) - 1) <= room:
            return size
        size -= 2
    return None


def _row(page: _Page, cells: list[Cell], size: int, y: int, title: bool = False) -> int | None:
    """Draw one row of cells with its boxes' top at `y`; the y below its boxes, or None if it does not fit."""
    texts = [text for cell in cells for text in cell.texts]
    gap = int(page.rng.integers(*CELL_GAP_PX))
    size = _fit(page, texts, size, page.right - page.left, gap)
    if size is None:
        return None
    inks = [page.ink(text, size) for text in texts]
    origin_y = y + BOX_MARGIN_PX - min(ink[1] for ink in inks)
    below = origin_y + max(ink[3] for ink in inks) + BOX_MARGIN_PX
    if below > page.bottom:
        return None
    widths = [ink[2] - ink[0] + 2 * BOX_MARGIN_PX for ink in inks]
    slack = page.right - page.left - sum(widths) - gap * (len(texts) - 1)
    x = page.left + (slack // 2 if title else int(page.rng.integers(0, min(slack, 80) + 1)))
    form = page.form
    colours = [colour for cell in cells for colour in
               ((form.label_ink, form.value_ink) if len(cell.texts) == 2 else (form.value_ink,))]
    if title:
        colours = [form.label_ink]
    for text, ink, width, colour in zip(texts, inks, widths, colours):
        page.put(text, x + BOX_MARGIN_PX - ink[0], origin_y, size, colour)
        x += width + gap
    return below


def _table(page: _Page, table: Table, size: int, y: int) -> int | None:
    """Draw a grid with one box per cell, its top line at `y`; the y of its bottom line, or None if it does not
    fit (across: the columns at MIN_PX; down: the rows above page.bottom)."""
    room = page.right - page.left + 16
    columns = list(zip(*table.rows))
    while size >= MIN_PX:
        widths = [max(page.ink(text, size)[2] - page.ink(text, size)[0] for text in column) + 2 * (BOX_MARGIN_PX +
                  CELL_PAD_PX) for column in columns]
        if sum(widths) <= room:
            break
        size -= 2
    else:
        return None
    widths = [w + (room - sum(widths)) * w // sum(widths) for w in widths]
    widths[-1] += room - sum(widths)  # the rounding's remainder: the grid ends where the ruled lines do
    lines = [max(page.ink(text, size)[3] for text in row) - min(page.ink(text, size)[1] for text in row)
             for row in table.rows]
    height = sum(lines) + len(lines) * 2 * (BOX_MARGIN_PX + CELL_PAD_PX // 2) + len(lines) + 1
    if y + height > page.bottom:
        return None
    x0 = page.left - 8
    edges = [x0 + sum(widths[:i]) for i in range(len(widths) + 1)]
    page.line_across(y)
    for index, row in enumerate(table.rows):
        top = y + 1 + CELL_PAD_PX // 2
        origin_y = top + BOX_MARGIN_PX - min(page.ink(text, size)[1] for text in row)
        for column, text in enumerate(row):
            ink = page.ink(text, size)
            page.put(text, edges[column] + CELL_PAD_PX + BOX_MARGIN_PX - ink[0], origin_y, size,
                     page.form.label_ink if index == 0 else page.form.value_ink)
        y = top + lines[index] + 2 * BOX_MARGIN_PX + CELL_PAD_PX // 2
        page.line_across(y)
    for x in edges:
        page.draw.line((x, y - height + 1, x, y), fill=page.form.rule, width=1)
    return y


def _seal(page: _Page) -> None:
    """A faint red ring (a company seal without its text) where it touches no box: real slips carry one, and a
    detector must not take it for text."""
    radius = int(page.rng.integers(34, 56))
    for _ in range(20):
        cx = int(page.rng.integers(page.left + radius, page.right - radius))
        cy = int(page.rng.integers(page.top + radius, page.bottom - radius))
        if all(cx + radius + 6 < b["points"][0][0] or cx - radius - 6 > b["points"][1][0] or
               cy + radius + 6 < b["points"][0][1] or cy - radius - 6 > b["points"][2][1] for b in page.boxes):
            # Faint and thin: a full-strength 3 px ring makes PP-OCRv4 expect stamp text inside it (2 of 43
            # sealed pages had a detection there), which no box could label.
            red = (int(page.rng.integers(236, 246)), int(page.rng.integers(165, 186)), int(page.rng.integers(165, 186)))
            page.draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), outline=red, width=2)
            return


def _fitted(cells: list[Cell], left: int) -> list[Cell]:
    """`cells` drawn in at most `left` boxes: pairs joined into one line from the last, then cells dropped."""
    cells = list(cells)
    for index in reversed(range(len(cells))):
        if sum(len(cell.texts) for cell in cells) > left and len(cells[index].texts) == 2:
            cells[index] = Cell(cells[index].label, cells[index].value, apart=False)
    return cells[:left]


def _row_gap(page: _Page, wanted: int, size: int, rng: np.random.Generator) -> int:
    """The page's gap between rows: a form with few lines spreads them down the paper, as printed forms do."""
    rows = max(2, round((wanted - 1) / 1.7))  # rows hold 1-2 lines on average
    spare = page.bottom - page.top - TITLE_PX[1] - rows * (size + 2 * BOX_MARGIN_PX)
    return int(np.clip(spare / (rows + 1) * rng.uniform(0.6, 1.1), *ROW_GAP_PX))


def _draw(rng: np.random.Generator, font: Path, form: Form) -> _Page:
    """One attempt at a page: its title, then the form's rows until LINES_PER_PAGE or the paper runs out."""
    page = _Page(rng, font, form)
    wanted = int(rng.integers(LINES_PER_PAGE[0], LINES_PER_PAGE[1] + 1))
    title, rows = form.content(rng)
    if sum(2 * row.columns for row in rows if isinstance(row, Table)) > wanted - 2:  # no room for a table and a row
        rows = [row for row in rows if not isinstance(row, Table)]
    size, ruled = int(rng.integers(*BODY_PX)), rng.random() < 0.5
    gap = _row_gap(page, wanted, size, rng)
    y = _row(page, [Cell(title)], int(rng.integers(*TITLE_PX)), page.top, title=True)
    if y is not None and rng.random() < 0.7:
        page.line_across(y + gap // 2)
    while rows and y is not None and len(page.boxes) < wanted:
        item, rows = rows[0], rows[1:]
        left = wanted - len(page.boxes)
        # Lines kept for a table further down (its header and one row), so budgets of 5-12 lines still show one.
        reserved = sum(2 * row.columns for row in rows if isinstance(row, Table))
        if not isinstance(item, Table):
            if left <= reserved:
                continue
            left -= reserved
        if isinstance(item, Table):
            item = item.first(left // item.columns)
            below = _table(page, item, size, y + gap) if item else None
        else:
            item = _fitted(item, left)
            below = _row(page, item, size, y + gap)
            if below is None and len(item) > 1:  # too wide together: one cell a row
                rows = [[cell] for cell in item] + rows
                continue
            if below is not None and ruled:
                page.line_across(below + gap // 2)
        y = below if below is not None else y
    if rng.random() < 0.4:
        _seal(page)
    return page


def render_page(seed: int, index: int, font: Path) -> tuple[Image.Image, list[dict]]:
    """Page `index` of a seed's series as a PIL image, and its boxes; the kinds take turns (cheque, invoice,
    slip), so any three pages in a row show all three."""
    rng = np.random.default_rng([seed, index])
    form = tuple(FORMS.values())[index % len(FORMS)]
    for _ in range(100):  # a short page may not hold five lines: draw another from where the generator is
        page = _draw(rng, font, form)
        if len(page.boxes) >= LINES_PER_PAGE[0]:
            return page.image, page.boxes
    raise DemoError(f"page {index} of seed {seed} did not hold {LINES_PER_PAGE[0]} lines in 100 tries with font "
                    f"{font}: is its glyph size far from the usual? Try another font")


def render_pages(out_dir: Path, count: int, seed: int, font: Path | None = None) -> list[tuple[str, list[dict]]]:
    """`count` page PNGs under out_dir/pages/, the same for the same seed and font: [(relative path, boxes)], each
    box PaddleOCR's `{"transcription": text, "points": [[x, y]] * 4}` (ints, clockwise from the top-left).

    Raises:
        NoCjkFont: `font` is None and no CJK font is installed.
    """
    out_dir, font = Path(out_dir), Path(font) if font else cjk_font()
    (out_dir / PAGES_FOLDER).mkdir(parents=True, exist_ok=True)
    entries = []
    for index in range(count):
        image, boxes = render_page(seed, index, font)
        relative = f"{PAGES_FOLDER}/{seed}_{index:05d}.png"
        # A 64-colour palette: the pages hold paper, a few inks and their antialiasing, so it loses nothing a
        # detector sees and keeps a page at a third of its RGB size (~14 KB).
        image.quantize(colors=64, method=Image.Quantize.FASTOCTREE).save(out_dir / relative)
        entries.append((relative, boxes))
    return entries


def write_det_label_file(path: Path, entries: list[tuple[str, list[dict]]]) -> Path:
    """PaddleOCR's detection label file: one `relative/path.png<TAB>boxes JSON` line per page, UTF-8, written to a
    temporary name beside it and renamed, so a reader never sees half a file."""
    path = Path(path)
    text = "".join(f"{relative}\t{json.dumps(boxes, ensure_ascii=False)}\n" for relative, boxes in entries)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    os.chmod(temporary, 0o644)  # mkstemp makes it private; a dataset is read by whoever runs the pipeline
    os.replace(temporary, path)
    return path


def write_demo_dataset(out_dir: Path, count: int, seed: int, test_fraction: float = 0.5,
                       font: Path | None = None) -> dict[str, Path]:
    """`count` pages and the label files a detection config names: {"calibration": ..., "test": ...} (paths
    relative to out_dir inside them; the first round(count * test_fraction) pages are the test split).

    Raises:
        DemoError: fewer than 2 pages, or a test fraction that leaves a split empty.
        NoCjkFont: `font` is None and no CJK font is installed.
    """
    tests = round(count * test_fraction)
    if not 0 < tests < count:
        raise DemoError(f"{count} page(s) with test fraction {test_fraction} leave the "
                        f"{'test' if tests <= 0 else 'calibration'} split empty; ask for more pages or a fraction "
                        "between 0 and 1")
    entries = render_pages(out_dir, count, seed, font)
    return {"calibration": write_det_label_file(Path(out_dir) / CALIBRATION_FILE, entries[tests:]),
            "test": write_det_label_file(Path(out_dir) / TEST_FILE, entries[:tests])}
