"""Scan a text-line dataset in PaddleOCR's layout into the data stage's file table.

`data.path` is the root folder, `data.label_file` lists `relative/path.png<TAB>label` lines (and
`data.test_label_file` the test split, when given). As with image folders, the flow runs this first:
every line, image and character is checked before anything is stored or trained, and the table's
content digest decides whether an earlier data stage can be reused.

In the table (`file_table.FileRow`) a line's `label_name` is its text and `label` its line number in
its label file (the test split's rows: in `test_label_file`), so that any row can be traced back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from quantgate.config import DataConfig
from quantgate.samples.errors import BadTextLines
from quantgate.samples.file_hashes import FileFacts, HashState, scan_files
from quantgate.samples.file_table import FileRow, content_sha256, relative_files
from quantgate.samples.text_labels import (
    SHOWN_PROBLEMS,
    LabelLine,
    describe_unknown,
    read_dictionary,
    read_label_file,
    unknown_characters,
)
from quantgate.samples.text_reading import resized_width
from quantgate.stages.data.locations import data_roots
from quantgate.stages.data.stratify import SPLIT_NAMES, plain_split
from quantgate.stages.data.validation_size import validation_rule

TRAINING_DICTIONARY = "the dictionary built from the training split's labels"


@dataclass(frozen=True)
class TextPlan:
    """The file table of a text-line dataset, its dictionary, and what describes them."""

    rows: list[FileRow]  # in split order, then in label-file order
    characters: tuple[str, ...]  # dictionary order: id = position + 1 (0 is the CTC blank)
    roots: dict[str, str]  # "path" -> absolute root folder
    input_shape: tuple[int, int, int]  # rec_image_shape
    label_files: dict[str, dict]  # setting -> {"path", "sha256"}
    dictionary: str  # where the characters come from: the dictionary file, or the training labels
    skipped: list[dict] = field(default_factory=list)  # lines left out: {"line", "file", "reason"}
    skipped_images: list[dict] = field(default_factory=list)  # undecodable images left out: {"file", "problem"}
    squeezed: list[str] = field(default_factory=list)  # "label_file:line" of lines squeezed to width W
    sources: dict[str, str] = field(default_factory=dict)  # a label file as lines name it -> its setting
    validation_rule: dict = field(default_factory=dict)  # how the validation split was sized (validation_size.py)

    @property
    def max_text_length(self) -> int:
        return max(len(row.label_name) for row in self.rows)

    @property
    def table_sha256(self) -> str:
        """sha256 of every row (sizes and mtimes included), the roots, the dictionary and what was left out:
        equal only for the same lines and files, untouched, in the same place."""
        rows = [[getattr(row, name) for name in row.__dataclass_fields__] for row in self.rows]
        return hashlib.sha256(json.dumps(
            {"rows": rows, "roots": self.roots, "characters": self.characters, "skipped": self.skipped,
             "squeezed": self.squeezed, "label_files": self.label_files}, sort_keys=True).encode()).hexdigest()

    @property
    def content_sha256(self) -> str:
        """sha256 of the lines' images and texts, the label files' and the dictionary's contents and what was left
        out or squeezed, each line named by its setting and number: equal for a copy of the dataset anywhere,
        touched or not; the flow reuses an earlier data stage on it."""
        return content_sha256(
            self.rows, characters=list(self.characters),
            label_files={key: entry["sha256"] for key, entry in self.label_files.items()},
            # why a line was left out follows from its text, the dictionary and its image's problem, all above;
            # the reason's words name the dictionary file, wherever it lies
            skipped=[[self._setting_line(item["line"]), item["file"]] for item in self.skipped],
            skipped_images=relative_files(self.skipped_images, self.roots),
            squeezed=[self._setting_line(where) for where in self.squeezed])

    def _setting_line(self, where: str) -> str:
        """"label.txt:12" as "label_file:12": the label file by its setting, not by where it lies."""
        source, number = where.rsplit(":", 1)
        return f"{self.sources.get(source, source)}:{number}"


def _scan_images(lines: list[LabelLine], root: Path, state: HashState, config: DataConfig):
    """(usable lines with their facts, skipped images, skipped lines) after hashing and checking every image.

    Raises:
        BadTextLines: an image cannot be read, or cannot be decoded and data.on_bad_image is 'error'.
    """
    try:
        facts = scan_files(sorted({str(root / line.file) for line in lines}), state, config.scan_workers)
    except OSError as exc:
        raise BadTextLines(f"cannot read {exc.filename or exc}: {exc.strerror or exc}; fix the file's permissions, "
                           "or remove its line, and run again") from exc
    good, bad_images, skipped = [], {}, []
    for line in lines:
        fact: FileFacts = facts[str(root / line.file)]
        if fact.problem is None:
            good.append((line, fact))
        else:
            bad_images[str(root / line.file)] = fact.problem
            skipped.append({"line": line.where, "file": line.file,
                            "reason": f"image cannot be decoded ({fact.problem})"})
    if bad_images and config.on_bad_image == "error":
        named = [f"{item['line']} {item['file']} ({item['reason']})" for item in skipped]
        shown = "; ".join(named[:SHOWN_PROBLEMS])
        raise BadTextLines(f"{len(named)} image(s) cannot be decoded: {shown}; replace or remove them, or set "
                           "data.on_bad_image: skip to leave their lines out (they are listed)")
    return good, [{"file": file, "problem": problem} for file, problem in bad_images.items()], skipped


def _too_wide(entries: list[tuple[LabelLine, FileFacts]], config: DataConfig) -> list[str]:
    """The lines wider than W once resized to height H; raises unless data.too_wide is 'squeeze'.

    Raises:
        BadTextLines: a line is too wide and data.too_wide is 'error'.
    """
    _, height, width = config.transforms.rec_image_shape
    wide = [(line, fact, resized_width(fact.width, fact.height, height)) for line, fact in entries]
    wide = [(line, fact, resized) for line, fact, resized in wide if resized > width]
    if wide and config.too_wide == "error":
        named = [f"{line.where} {line.file} ({fact.width}x{fact.height} -> {resized}x{height})"
                 for line, fact, resized in wide]
        shown = "; ".join(named[:SHOWN_PROBLEMS])
        more = f" and {len(named) - SHOWN_PROBLEMS} more" if len(named) > SHOWN_PROBLEMS else ""
        widest = max(resized for _, _, resized in wide)
        raise BadTextLines(
            f"{len(named)} line image(s) are wider than W={width} once resized to height H={height}: {shown}{more}; "
            f"widen data.transforms.rec_image_shape to W >= {widest}, crop the images, or set data.too_wide: squeeze "
            "to resize them to exactly W")
    return [line.where for line, _, _ in wide]


def _leave_out(found: dict[LabelLine, list[str]], dictionary: str, config: DataConfig) -> list[dict]:
    """The skipped-line records of lines with unknown characters; raises unless data.unknown_chars is 'skip'."""
    if found and config.unknown_chars == "error":
        raise describe_unknown(found, dictionary)
    return [{"line": line.where, "file": line.file, "reason": f"characters not in {dictionary}: {''.join(chars)}"}
            for line, chars in found.items()]


def with_space(characters: tuple[str, ...], source: str) -> tuple[str, ...]:
    """The dictionary with a space as its last character, as PaddleOCR's `use_space_char` adds it.

    Raises:
        BadTextLines: the dictionary already holds a space (PaddleOCR would then have two).
    """
    if " " in characters:
        raise BadTextLines(f"data.character_dict {source} already holds a space (line {characters.index(' ') + 1}) "
                           "and data.use_space_char adds another; set data.use_space_char: false")
    return (*characters, " ")


def plan_text_lines(config: DataConfig, state: HashState | None = None, training: bool = True) -> TextPlan:
    """Read and check the label file(s) and dictionary, hash and check every image, split the lines.

    Raises:
        BadTextLines: a label line, the dictionary or an image is unusable (each named by file and line,
            with the fix); or a split would be empty.
    """
    state = state or HashState(None)
    root = Path(data_roots(config)["path"])
    if not root.is_dir():
        raise BadTextLines(f"data.path {root} does not exist or is not a folder; set it to the folder the label "
                           "file's image paths are relative to")
    settings = {"label_file": config.label_file, **({"test_label_file": config.test_label_file}
                                                    if config.test_label_file else {})}
    read = {key: read_label_file(Path(value).expanduser(), root, key) for key, value in settings.items()}
    skipped: list[dict] = []
    dictionary = TRAINING_DICTIONARY
    characters: tuple[str, ...] = ()
    if config.character_dict:
        characters, dictionary = read_dictionary(Path(config.character_dict).expanduser()), \
            f"data.character_dict {config.character_dict}"
        if config.use_space_char:
            characters = with_space(characters, config.character_dict)
            dictionary += " and a space (data.use_space_char)"
        for key, lines in read.items():  # checked before any image is hashed: the cheap mistakes first
            unknown = unknown_characters(lines, characters)
            skipped += _leave_out(unknown, dictionary, config)
            read[key] = [line for line in lines if line not in unknown]
    entries, skipped_images, bad_lines = _scan_images([line for lines in read.values() for line in lines], root,
                                                      state, config)
    skipped += bad_lines
    squeezed = _too_wide(entries, config)
    usable = dict(entries)
    main, test = ([(line, usable[line]) for line in read.get(key, []) if line in usable]
                  for key in ("label_file", "test_label_file"))
    indices = plain_split(len(main), config, test_count=len(test), training=training)
    ordered = main + test
    chosen = {name: [ordered[index] for index in indices[name]] for name in SPLIT_NAMES}
    if not characters:
        characters = tuple(sorted({c for line, _ in chosen["train"] for c in line.text}))
        for name in SPLIT_NAMES[1:]:
            unknown = unknown_characters([line for line, _ in chosen[name]], characters)
            skipped += _leave_out(unknown, TRAINING_DICTIONARY, config)
            chosen[name] = [(line, fact) for line, fact in chosen[name] if line not in unknown]
    rows = [FileRow(split=name, root="path", file=line.file, label=line.number, label_name=line.text,
                    size=fact.size, mtime_ns=fact.mtime_ns, sha256=fact.sha256)
            for name in SPLIT_NAMES for line, fact in chosen[name]]
    for name in ("train", "calibration", "test") if training else ("calibration", "test"):
        if not chosen[name]:
            raise BadTextLines(f"the {name} split has no line left once {len(skipped)} unusable line(s) are "
                               f"skipped (e.g. {skipped[0]['line'] if skipped else '-'}); add lines or fix those")
    label_files = {key: {"path": str(Path(value).expanduser().resolve()),
                         "sha256": hashlib.sha256(Path(value).expanduser().read_bytes()).hexdigest()}
                   for key, value in settings.items()}
    sources = {str(Path(value).expanduser()): key for key, value in settings.items()}  # as LabelLine.where names them
    rule = validation_rule(config, len(chosen["validation"]), len(chosen["calibration"]), training)
    return TextPlan(rows, characters, {"path": str(root)}, tuple(config.transforms.rec_image_shape), label_files,
                    dictionary, skipped, skipped_images, squeezed, sources, rule)
