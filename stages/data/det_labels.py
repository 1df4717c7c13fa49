"""PaddleOCR's text-detection label files, read strictly.

A label file holds one `relative/page.png<TAB>[{"transcription": "...", "points": [[x, y], ...]}, ...]` line per
page, UTF-8, as PaddleOCR's DetLabelEncode reads it (and PPOCRLabel writes it). Every problem is collected and named
by file, line and box with its fix before anything is hashed or stored: detection labels come from annotation
tools, scripts and hand edits, and one bad box found at evaluation time would waste the whole run.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from quantgate.errors import clipped
from quantgate.samples.errors import BadTextBoxes, BadTextLines
from quantgate.samples.text_labels import SHOWN_PROBLEMS, read_utf8_lines
from quantgate.tasks.det_metrics import IGNORED_TRANSCRIPTIONS  # PaddleOCR's "don't care" marks

INSIDE_TOLERANCE_PX = 1.0  # annotation tools round points outward; one pixel past the edge is still the page
WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
LABEL_EXAMPLE = '[{"transcription": "金额", "points": [[10, 20], [90, 20], [90, 50], [10, 50]]}]'

# The fix for each kind of problem, said once at the end of the message however many lines have it.
FIXES = {
    "tab": "write each line as `relative/page.png<TAB>label JSON` (a tab, not spaces)",
    "path": "write page paths relative to data.path, without `..` or a leading `/`",
    "missing": "fix the paths (relative to data.path) or add the pages",
    "duplicate": "list each page once, with all its boxes in one JSON list",
    "json": f"write the label as PaddleOCR's JSON list, e.g. {LABEL_EXAMPLE}",
    "shape": f"give each page a non-empty JSON list of objects, e.g. {LABEL_EXAMPLE} (PaddleOCR skips a page "
             "without boxes)",
    "box": 'give every box a "transcription" string ("###" for text to ignore) and "points": 4 or more [x, y] '
           "pairs of numbers, clockwise from the top-left",
}


@dataclass(frozen=True)
class Box:
    """One labelled region: its polygon in page pixels and its text."""

    points: tuple[tuple[float, float], ...]  # 4 or more (x, y), in the label's order
    transcription: str

    @property
    def ignore(self) -> bool:
        """PaddleOCR's rule: "###" (and "*") mark text nobody could read; a detector is neither credited nor
        blamed for it."""
        return self.transcription in IGNORED_TRANSCRIPTIONS


@dataclass(frozen=True)
class BoxLine:
    """One line of a label file: where it is written, the page it names and the page's boxes."""

    source: str  # the label file, for messages
    number: int  # 1-based line number in that file
    file: str  # the page, relative to data.path, as written
    boxes: tuple[Box, ...]

    @property
    def where(self) -> str:
        return f"{self.source}:{self.number}"


def _escapes(file: str) -> bool:
    """Whether `file` leaves the root folder, judged on the text as text_labels judges recognition paths."""
    return file.startswith(("/", "\\")) or bool(WINDOWS_DRIVE.match(file)) or ".." in PurePosixPath(file).parts


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), "null")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _box(entry: object, name: str) -> tuple[Box | None, str | None]:
    """A parsed box, or the problem with it (`name` says which box, for the message)."""
    if not isinstance(entry, dict):
        shown = clipped(json.dumps(entry, ensure_ascii=False), 40)
        return None, f"{name} is a JSON {_json_type(entry)} {shown}, not an object"
    if "points" not in entry:
        return None, f'{name} has no "points"'
    points = entry["points"]
    pairs = points if isinstance(points, list) else []
    if len(pairs) < 4 or not all(isinstance(p, list) and len(p) == 2 and all(map(_number, p)) for p in pairs):
        shown = clipped(json.dumps(points, ensure_ascii=False), 80)
        return None, f'{name} "points" {shown} is not 4 or more [x, y] pairs of numbers'
    text = entry.get("transcription")
    if not isinstance(text, str):
        return None, f'{name} has {"no" if text is None else "a non-string"} "transcription"'
    return Box(tuple((float(x), float(y)) for x, y in pairs), text), None


def _boxes(label: str, column: int) -> tuple[tuple[Box, ...], list[tuple[str, str]]]:
    """The boxes of one label, or the problems with it as (kind, text); the label starts at `column` (1-based) of
    its line, so a JSON error names the column an editor shows."""
    try:
        parsed = json.loads(label)
    except json.JSONDecodeError as exc:
        return (), [("json", f"label is not JSON at column {column + exc.pos} ({exc.msg}, near "
                             f"{clipped(label[max(0, exc.pos - 10):exc.pos + 10], 30)!r})")]
    if not isinstance(parsed, list) or not parsed:
        what = "an empty list" if parsed == [] else f"a JSON {_json_type(parsed)}"
        return (), [("shape", f"label is {what}, not a list of boxes")]
    boxes, problems = [], []
    for index, entry in enumerate(parsed, start=1):
        box, problem = _box(entry, f"box {index} of {len(parsed)}")
        if problem:
            problems.append(("box", problem))
        else:
            boxes.append(box)
    return tuple(boxes), problems


def read_box_label_file(path: Path, root: Path, setting: str = "label_file") -> list[BoxLine]:
    """Every non-empty line of a PaddleOCR detection label file, checked: a tab, a page path that stays under
    `root`, names a file there and no earlier line, and a JSON list of boxes with a transcription and 4+ points.

    Raises:
        BadTextBoxes: the file is unreadable or not UTF-8, holds no line, or lines are malformed (every problem
            collected; the first few named by file, line and box, with the fix for each kind).
    """
    source = str(path)
    try:
        text_lines = read_utf8_lines(path, setting)
    except BadTextLines as exc:  # the shared reader's message (unreadable, not UTF-8), in this dataset's error
        raise BadTextBoxes(str(exc)) from exc
    parsed, problems, first_line = [], [], {}
    for number, line in enumerate(text_lines, start=1):
        if not line:
            continue
        where = f"{source}:{number}"
        if "\t" not in line:
            problems.append(("tab", f"{where} has no tab: {clipped(line, 60)!r}"))
            continue
        file, label = line.split("\t", 1)
        if not file or _escapes(file):
            problems.append(("path", f"{where} page path {clipped(file, 80)!r} is "
                                     f"{'empty' if not file else 'outside data.path'}"))
        elif file in first_line:
            problems.append(("duplicate", f"{where} {file} is already listed on line {first_line[file]}"))
        elif not os.path.isfile(root / file):
            problems.append(("missing", f"{where} page {root / file} does not exist"))
        first_line.setdefault(file, number)
        boxes, found = _boxes(label, len(file) + 2)
        problems += [(kind, f"{where} {text}") for kind, text in found]
        if file and not found:
            parsed.append(BoxLine(source, number, file, boxes))
    if problems:
        shown = "; ".join(text for _, text in problems[:SHOWN_PROBLEMS])
        more = f" and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        fixes = "; ".join(dict.fromkeys(FIXES[kind] for kind, _ in problems))
        raise BadTextBoxes(f"data.{setting} {path}: {len(problems)} problem(s): {shown}{more}. To fix: {fixes}")
    if not parsed:
        raise BadTextBoxes(f"data.{setting} {path} holds no label line; add `relative/page.png<TAB>{LABEL_EXAMPLE}` "
                           "lines")
    return parsed


def _on_page(x: float, y: float, width: int, height: int) -> bool:
    tolerance = INSIDE_TOLERANCE_PX
    return -tolerance <= x <= width + tolerance and -tolerance <= y <= height + tolerance


def check_inside(lines: list[BoxLine], sizes: dict[str, tuple[int, int]]) -> None:
    """Every point of every box lies on its page, within INSIDE_TOLERANCE_PX; `sizes` maps a line's file to its
    page's (width, height) in pixels.

    Raises:
        BadTextBoxes: naming each box outside its page (file, line, box, the first point outside and the page size).
    """
    outside = []
    for line in lines:
        width, height = sizes[line.file]
        for index, box in enumerate(line.boxes, start=1):
            point = next(((x, y) for x, y in box.points if not _on_page(x, y, width, height)), None)
            if point is not None:
                outside.append(f"{line.where} {line.file} box {index} of {len(line.boxes)} has point "
                               f"[{point[0]:g}, {point[1]:g}] outside the {width}x{height} page")
    if outside:
        shown = "; ".join(outside[:SHOWN_PROBLEMS])
        more = f" and {len(outside) - SHOWN_PROBLEMS} more" if len(outside) > SHOWN_PROBLEMS else ""
        raise BadTextBoxes(f"{len(outside)} box(es) reach outside their page: {shown}{more}; fix the points (page "
                           f"pixels, x from 0 to the width, y from 0 to the height), or the page path if the label "
                           "belongs to another image")
