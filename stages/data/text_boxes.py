"""Scan a text-detection dataset in PaddleOCR's layout (pages and their boxes) into the data stage's file table.

`data.path` is the root folder, `data.label_file` lists `relative/page.png<TAB>[{"transcription", "points"}, ...]`
lines (and `data.test_label_file` the test split, when given). As for text lines, every line, box and page is
checked before anything is stored: the label JSON and its points (`det_labels.py`), every page decodes, every
box lies inside its page, and every page fits `data.transforms.det_canvas` once resized as PaddleOCR's
DetResizeForTest resizes it (the runtimes run one static shape).

In the table (`file_table.FileRow`) a page's `label_name` is its boxes as canonical JSON and `label` its line
number in its label file, so any row can be traced back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from quantgate.config import DataConfig
from quantgate.samples.errors import BadTextBoxes
from quantgate.samples.file_hashes import FileFacts, HashState, scan_files
from quantgate.samples.file_table import FileRow, content_sha256
from quantgate.samples.text_labels import SHOWN_PROBLEMS
from quantgate.stages.data.det_labels import BoxLine, check_inside, read_box_label_file
from quantgate.stages.data.locations import data_roots
from quantgate.stages.data.stratify import SPLIT_NAMES, plain_split
from quantgate.tasks.det_resize import det_resize_shape


@dataclass(frozen=True)
class BoxPlan:
    """The file table of a detection dataset and what describes it."""

    rows: list[FileRow]  # in split order, then in label-file order
    roots: dict[str, str]  # "path" -> absolute root folder
    label_files: dict[str, dict]  # setting -> {"path", "sha256"}
    boxes: int  # ground-truth boxes over every page, ignored regions included
    ignored: int  # of which '###' regions

    @property
    def table_sha256(self) -> str:
        rows = [[getattr(row, name) for name in row.__dataclass_fields__] for row in self.rows]
        return hashlib.sha256(json.dumps({"rows": rows, "roots": self.roots, "label_files": self.label_files},
                                         sort_keys=True).encode()).hexdigest()

    @property
    def content_sha256(self) -> str:
        """sha256 of the pages' bytes and places under data.path, their boxes and the label files' contents: equal
        for a copy of the dataset anywhere, touched or not; the flow reuses an earlier data stage on it."""
        return content_sha256(self.rows, label_files={key: entry["sha256"] for key, entry in self.label_files.items()})


def boxes_json(line: BoxLine) -> str:
    """A page's boxes as PaddleOCR writes them, canonical (the table's label and the task's reference)."""
    return json.dumps([{"transcription": box.transcription, "points": [[round(x, 2), round(y, 2)] for x, y in box.points]}
                       for box in line.boxes], ensure_ascii=False, separators=(",", ":"))


def _scan(lines: list[BoxLine], root: Path, state: HashState, config: DataConfig) -> dict[str, FileFacts]:
    try:
        facts = scan_files(sorted({str(root / line.file) for line in lines}), state, config.scan_workers)
    except OSError as exc:
        raise BadTextBoxes(f"cannot read {exc.filename or exc}: {exc.strerror or exc}; fix the file's permissions, "
                           "or remove its line, and run again") from exc
    bad = [f"{line.where} {line.file} ({facts[str(root / line.file)].problem})" for line in lines
           if facts[str(root / line.file)].problem is not None]
    if bad:
        raise BadTextBoxes(f"{len(bad)} page image(s) cannot be decoded: {'; '.join(bad[:SHOWN_PROBLEMS])}; replace "
                           "or remove them")
    return facts


def _check_canvas(lines: list[BoxLine], facts: dict[str, FileFacts], root: Path, config: DataConfig) -> None:
    """Every page, resized as configured, must fit the canvas the runtimes are compiled for."""
    transforms = config.transforms
    canvas_h, canvas_w = transforms.det_canvas
    too_large = []
    for line in lines:
        fact = facts[str(root / line.file)]
        resized_h, resized_w = det_resize_shape(fact.height, fact.width, transforms.det_limit_side_len,
                                                transforms.det_limit_type)
        if resized_h > canvas_h or resized_w > canvas_w:
            too_large.append((line, fact, resized_h, resized_w))
    if not too_large:
        return
    named = [f"{line.where} {line.file} ({fact.width}x{fact.height} -> {w}x{h})" for line, fact, h, w in too_large]
    largest_h, largest_w = max(h for *_, h, _ in too_large), max(w for *_, w in too_large)
    fix = (f"lower data.transforms.det_limit_side_len to {max(canvas_h, canvas_w)} or less (with det_limit_type "
           f"'max', pages are shrunk to it)" if transforms.det_limit_type == "max" else
           "set data.transforms.det_limit_type: max and det_limit_side_len to the canvas side")
    raise BadTextBoxes(
        f"{len(named)} page(s) are larger than data.transforms.det_canvas {[canvas_h, canvas_w]} once resized "
        f"(det_limit_side_len {transforms.det_limit_side_len}, det_limit_type {transforms.det_limit_type!r}): "
        f"{'; '.join(named[:SHOWN_PROBLEMS])}; {fix}, or enlarge det_canvas to at least "
        f"[{max(largest_h, canvas_h)}, {max(largest_w, canvas_w)}]")


def plan_text_boxes(config: DataConfig, state: HashState | None = None, training: bool = False,
                    all_test: bool = False) -> BoxPlan:
    """Read and check the label file(s), hash and check every page, split the pages (nothing trains a detector
    here: `training` only decides the split rule, as for other trained models). With `all_test` (an OCR system,
    which calibrates nothing) every page is a test page.

    Raises:
        BadTextBoxes: a label line, a box or a page is unusable, or a page does not fit the canvas (each named,
            with the fix); or a split would be empty.
    """
    state = state or HashState(None)
    root = Path(data_roots(config)["path"])
    if not root.is_dir():
        raise BadTextBoxes(f"data.path {root} does not exist or is not a folder; set it to the folder the label "
                           "file's page paths are relative to")
    settings = {"label_file": config.label_file, **({"test_label_file": config.test_label_file}
                                                    if config.test_label_file else {})}
    read = {key: read_box_label_file(Path(value).expanduser(), root, key) for key, value in settings.items()}
    every = [line for lines in read.values() for line in lines]
    facts = _scan(every, root, state, config)
    check_inside(every, {line.file: (facts[str(root / line.file)].width, facts[str(root / line.file)].height)
                         for line in every})
    _check_canvas(every, facts, root, config)
    main, test = read["label_file"], read.get("test_label_file", [])
    ordered = main + test
    indices = ({name: [] for name in SPLIT_NAMES} | {"test": range(len(ordered))} if all_test else
               plain_split(len(main), config, test_count=len(test), training=training))
    rows = []
    for name in SPLIT_NAMES:
        for index in indices[name]:
            line = ordered[index]
            fact = facts[str(root / line.file)]
            rows.append(FileRow(split=name, root="path", file=line.file, label=line.number,
                                label_name=boxes_json(line), size=fact.size, mtime_ns=fact.mtime_ns,
                                sha256=fact.sha256))
    label_files = {key: {"path": str(Path(value).expanduser().resolve()),
                         "sha256": hashlib.sha256(Path(value).expanduser().read_bytes()).hexdigest()}
                   for key, value in settings.items()}
    boxes = [box for line in every for box in line.boxes]
    return BoxPlan(rows, {"path": str(root)}, label_files, len(boxes), sum(box.ignore for box in boxes))
