"""PaddleOCR's recognition label files and character dictionaries, read strictly.

A label file holds one `relative/path.png<TAB>label` line per image, UTF-8; a dictionary one entry
per line (a character, or a symbol of several code points such as a flag emoji). Every problem is named by file and line with its fix, before anything is hashed or stored:
OCR teams' files come from many tools (GBK editors, Windows line ends, hand-edited paths).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from quantgate.errors import clipped
from quantgate.samples.errors import BadTextLines
from quantgate.tasks.text import split_entries

SHOWN_PROBLEMS = 10
WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


@dataclass(frozen=True)
class LabelLine:
    """One line of a label file: where it is written, the image it names and its text."""

    source: str  # the label file, for messages
    number: int  # 1-based line number in that file
    file: str  # the image, relative to data.path, as written
    text: str

    @property
    def where(self) -> str:
        return f"{self.source}:{self.number}"


def _problems(kind: str, found: list[str], fix: str) -> BadTextLines:
    shown = "; ".join(found[:SHOWN_PROBLEMS])
    more = f" and {len(found) - SHOWN_PROBLEMS} more" if len(found) > SHOWN_PROBLEMS else ""
    return BadTextLines(f"{len(found)} {kind}: {shown}{more}; {fix}")


def read_utf8_lines(path: Path, setting: str) -> list[str]:
    """The lines of a UTF-8 text file (a leading BOM and CR-LF line ends accepted), the last one dropped if empty.

    Raises:
        BadTextLines: the file is missing, unreadable, or not UTF-8 (naming the byte offset and line).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadTextLines(f"data.{setting} {path} cannot be read ({exc.strerror or exc}); check the path") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadTextLines(
            f"data.{setting} {path} is not UTF-8: byte {exc.start} (line {line}) is {data[exc.start:exc.start + 1]!r}; "
            "save it as UTF-8 (e.g. `iconv -f GBK -t UTF-8 old.txt > new.txt`)") from exc
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    return lines[:-1] if lines and lines[-1] == "" else lines


def _escapes(file: str) -> bool:
    """Whether `file` leaves the root folder: absolute, a drive, or a `..` step (judged on the text, so a
    link inside the folder may still point elsewhere, as with image folders)."""
    return file.startswith(("/", "\\")) or bool(WINDOWS_DRIVE.match(file)) or ".." in PurePosixPath(file).parts


def read_label_file(path: Path, root: Path, setting: str = "label_file") -> list[LabelLine]:
    """Every non-empty line of a PaddleOCR label file, checked: a tab, a label, a path that stays under
    `root` and names a file there. The label is everything after the first tab.

    Raises:
        BadTextLines: the file is unreadable or not UTF-8, holds no line, or lines are malformed (each
            kind of problem listed by file and line, with its fix).
    """
    source = str(path)
    parsed, no_tab, empty, escaping, missing = [], [], [], [], []
    for number, line in enumerate(read_utf8_lines(path, setting), start=1):
        if not line:
            continue
        where = f"{source}:{number}"
        if "\t" not in line:
            no_tab.append(f"{where} {clipped(line, 60)!r}")
            continue
        file, text = line.split("\t", 1)
        if not text:
            empty.append(f"{where} ({file})")
        elif _escapes(file) or not file:
            escaping.append(f"{where} {clipped(file, 80)!r}")
        elif not os.path.isfile(root / file):
            missing.append(f"{where} {root / file}")
        else:
            parsed.append(LabelLine(source, number, file, text))
    if no_tab:
        raise _problems("label line(s) without a tab", no_tab,
                        "write each line as `relative/path.png<TAB>label` (a tab, not spaces)")
    if empty:
        raise _problems("label line(s) with an empty label", empty, "give each image its text, or remove the line")
    if escaping:
        raise _problems(f"image path(s) outside data.path {root}", escaping,
                        "write paths relative to data.path, without `..` or a leading `/`")
    if missing:
        raise _problems("image file(s) that do not exist", missing,
                        "fix the paths (relative to data.path) or add the images")
    if not parsed:
        raise BadTextLines(f"data.{setting} {path} holds no label line; add `relative/path.png<TAB>label` lines")
    return parsed


def read_dictionary(path: Path) -> tuple[str, ...]:
    """A PaddleOCR character dictionary: one entry per line, in id order (id = position + 1). An entry is one
    character, or several code points read as one (PP-OCRv5's flag emojis: 🇩🇪 is two regional indicators); labels
    are cut into entries by greedy longest match (`quantgate.tasks.text.split_entries`), as PaddleOCR's encoder does.

    Raises:
        BadTextLines: the file is unreadable, not UTF-8 or empty, or a line is empty, holds whitespace around a
            longer entry, or repeats an earlier one.
    """
    characters, first_line, bad = [], {}, []
    for number, entry in enumerate(read_utf8_lines(path, "character_dict"), start=1):
        if not entry:
            bad.append(f"{path}:{number} is empty")
        elif len(entry) > 1 and entry != entry.strip():
            bad.append(f"{path}:{number} {clipped(entry, 20)!r} has whitespace around it")
        elif entry in first_line:
            bad.append(f"{path}:{number} {entry!r} repeats line {first_line[entry]}")
        else:
            first_line[entry] = number
            characters.append(entry)
    if bad:
        raise _problems("bad dictionary line(s)", bad,
                        "give data.character_dict one distinct entry per line (a character, or a multi-code-point "
                        "symbol such as a flag emoji), without surrounding spaces")
    if not characters:
        raise BadTextLines(f"data.character_dict {path} is empty; list one character per line")
    return tuple(characters)


def unknown_characters(lines: list[LabelLine], characters: tuple[str, ...]) -> dict[LabelLine, list[str]]:
    """The lines whose label holds text no dictionary entry matches (cut as `split_entries` cuts it), with those
    pieces (first seen first)."""
    known = dict.fromkeys(characters)
    found = {}
    for line in lines:
        missing = list(dict.fromkeys(piece for piece in split_entries(line.text, known) if piece not in known))
        if missing:
            found[line] = missing
    return found


def describe_unknown(found: dict[LabelLine, list[str]], dictionary: str) -> BadTextLines:
    """The error for labels with characters missing from the dictionary (`dictionary` says which one)."""
    named = [f"{line.where} {', '.join(f'{c!r} (' + ' '.join(f'U+{ord(p):04X}' for p in c) + ')' for c in chars)}" for line, chars in found.items()]
    return _problems(f"label line(s) with characters missing from {dictionary}", named,
                     "add the characters to data.character_dict, or set data.unknown_chars: skip to leave those "
                     "lines out (they are listed in the data manifest)")
