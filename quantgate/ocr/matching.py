"""How well an OCR system read a page, line by line, and where two systems (FP32 and INT8) read it differently.

Ground truth is PaddleOCR's detection label of a page: [{"points": [[x, y], ...], "transcription": str}, ...],
where the transcription "###" (or "*", as PaddleOCR's DetLabelEncode also reads it) marks a region nobody could
read (ignored: not a line to find, and a box on it is no mistake). A system's reading of a page is
[(points [4, 2], text), ...].

A ground-truth line is found when one read box overlaps it with polygon IoU >= the threshold (0.5), and read when
that box's text equals the transcription exactly. Boxes are paired one to one, greedily from the highest IoU, so two
boxes on one line give one match and one spurious box. This is an end-to-end score, not the detection metric:
quantgate/quantgate/tasks/det_metrics.py keeps PaddleOCR's DetMetric rules (IoU > 0.5, pairs in label order) for that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import shapely
from rapidfuzz.distance import Levenshtein

from quantgate.tasks.det_metrics import IGNORED_TRANSCRIPTIONS  # PaddleOCR's "don't care" marks

IOU_THRESHOLD = 0.5
IGNORED_COVER = 0.5  # a read box at least this much inside an ignored region is on it (ICDAR's don't-care rule)
IOU_TOLERANCE = 1e-9  # an overlap of exactly the threshold, computed in floats, still counts

ReadLine = tuple[np.ndarray | Sequence, str]


@dataclass(frozen=True)
class LineMatch:
    """One page's reading against its ground truth. Per-line tuples follow the input lists' order."""

    gt_read: tuple[int | None, ...]  # per ground-truth line: the read line matched to it (None: missed, or ignored)
    readings: tuple[str | None, ...]  # per ground-truth line: the text read for it (None when unmatched)
    ignored: tuple[bool, ...]  # per ground-truth line: an ignored ("###" or "*") region
    read_on_ignored: tuple[bool, ...]  # per read line: unmatched but on an ignored region (not spurious)
    gt_lines: int  # ground-truth lines to read (ignored regions excluded)
    read_lines: int  # read lines, all of them
    matched: int
    exact: int  # matched and read exactly
    missed: int  # ground-truth lines no read box matched
    spurious: int  # read lines matched to no ground-truth line and not on an ignored region
    errors: int  # character edit distance summed over matched lines
    chars: int  # ground-truth characters of matched lines

    @property
    def cer_pct(self) -> float | None:
        """Character error rate over the matched lines, in percent (None when no matched line has characters)."""
        return 100.0 * self.errors / self.chars if self.chars else None


def _polygon(points: np.ndarray | Sequence, what: str) -> shapely.Geometry:
    array = np.asarray(points, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != 2 or len(array) < 3 or not np.all(np.isfinite(array)):
        raise ValueError(f"{what} needs at least 3 finite (x, y) points; got {np.asarray(points).tolist()!r}")
    polygon = shapely.Polygon(array)
    # Self-crossing labels (corners in the wrong order) happen in real data; their valid form keeps the area.
    return polygon if polygon.is_valid else shapely.make_valid(polygon)


def _ground_truth(gt: Sequence[dict]) -> tuple[list[shapely.Geometry], list[str]]:
    polygons, texts = [], []
    for index, line in enumerate(gt):
        if not isinstance(line, dict) or "points" not in line or not isinstance(line.get("transcription"), str):
            raise ValueError(f"ground-truth line {index} is not a {{'points': [[x, y], ...], 'transcription': str}} "
                             f"dict (PaddleOCR's detection label); got {line!r}")
        polygons.append(_polygon(line["points"], f"ground-truth line {index}"))
        texts.append(line["transcription"])
    return polygons, texts


def _read(read: Sequence[ReadLine]) -> tuple[list[shapely.Geometry], list[str]]:
    polygons, texts = [], []
    for index, line in enumerate(read):
        if len(line) != 2 or not isinstance(line[1], str):
            raise ValueError(f"read line {index} is not a (points, text) pair; got {line!r}")
        polygons.append(_polygon(line[0], f"read line {index}"))
        texts.append(line[1])
    return polygons, texts


def _overlaps(first: list[shapely.Geometry], second: list[shapely.Geometry]) -> tuple[np.ndarray, np.ndarray]:
    """Intersection areas [len(first), len(second)] and the areas of `second`."""
    if not first or not second:
        return np.zeros((len(first), len(second))), shapely.area(np.array(second, dtype=object)).astype(float)
    a, b = np.array(first, dtype=object), np.array(second, dtype=object)
    return shapely.area(shapely.intersection(a[:, None], b[None, :])), shapely.area(b)


def match_lines(gt: Sequence[dict], read: Sequence[ReadLine], iou_threshold: float = IOU_THRESHOLD) -> LineMatch:
    """Pair a page's read lines with its ground-truth lines (polygon IoU >= iou_threshold, one to one, highest IoU
    first) and count what was found, read exactly, missed and made up.

    Ground-truth lines are matched first; a read box left over is on an ignored region when at least IGNORED_COVER
    of its area lies inside one, so a fragment of an illegible block is no spurious line either.

    Raises:
        ValueError: a ground-truth line or read line is malformed (the message names which).
    """
    gt_polygons, gt_texts = _ground_truth(gt)
    read_polygons, read_texts = _read(read)
    ignored = [text in IGNORED_TRANSCRIPTIONS for text in gt_texts]
    counted = [i for i, skip in enumerate(ignored) if not skip]

    inter, read_areas = _overlaps([gt_polygons[i] for i in counted], read_polygons)
    gt_areas = shapely.area(np.array([gt_polygons[i] for i in counted], dtype=object)).astype(float)
    union = gt_areas[:, None] + read_areas[None, :] - inter
    iou = np.divide(inter, union, out=np.zeros_like(union, dtype=float), where=union > 0)

    gt_read: list[int | None] = [None] * len(gt)
    read_gt: list[int | None] = [None] * len(read)
    rows, columns = np.nonzero(iou >= iou_threshold - IOU_TOLERANCE)
    # Ties broken by position so the pairing, and so the counts, never depend on the sort's whims.
    for row, column in sorted(zip(rows.tolist(), columns.tolist()), key=lambda rc: (-iou[rc], rc[0], rc[1])):
        line = counted[row]
        if gt_read[line] is None and read_gt[column] is None:
            gt_read[line], read_gt[column] = column, line

    ignored_polygons = [gt_polygons[i] for i, skip in enumerate(ignored) if skip]
    cover, _ = _overlaps(read_polygons, ignored_polygons)
    inside = cover.max(axis=1) if ignored_polygons else np.zeros(len(read))
    on_ignored = [read_gt[j] is None and read_areas[j] > 0 and inside[j] / read_areas[j] >= IGNORED_COVER
                  for j in range(len(read))]

    readings = tuple(None if j is None else read_texts[j] for j in gt_read)
    pairs = [(gt_texts[i], readings[i]) for i in counted if readings[i] is not None]
    matched = len(pairs)
    return LineMatch(
        gt_read=tuple(gt_read), readings=readings, ignored=tuple(ignored), read_on_ignored=tuple(on_ignored),
        gt_lines=len(counted), read_lines=len(read), matched=matched,
        exact=sum(truth == text for truth, text in pairs), missed=len(counted) - matched,
        spurious=len(read) - matched - sum(on_ignored),
        errors=sum(Levenshtein.distance(truth, text) for truth, text in pairs),
        chars=sum(len(truth) for truth, _ in pairs))


def match_pages(pages_gt: Sequence[Sequence[dict]], pages_read: Sequence[Sequence[ReadLine]],
                iou_threshold: float = IOU_THRESHOLD) -> list[LineMatch]:
    """match_lines for each page.

    Raises:
        ValueError: the two lists have different lengths, or a line is malformed (the message names the page).
    """
    if len(pages_gt) != len(pages_read):
        raise ValueError(f"{len(pages_gt)} pages of ground truth but {len(pages_read)} pages read: every page needs "
                         "a reading (an empty list when nothing was found)")
    matches = []
    for page, (gt, read) in enumerate(zip(pages_gt, pages_read)):
        try:
            matches.append(match_lines(gt, read, iou_threshold))
        except ValueError as exc:
            raise ValueError(f"page {page}: {exc}") from exc
    return matches


def scores_of(matches: Sequence[LineMatch]) -> dict:
    """End-to-end scores summed over pages (see system_scores).

    Raises:
        ValueError: the pages have no ground-truth line to read.
    """
    total = {name: sum(getattr(match, name) for match in matches)
             for name in ("gt_lines", "read_lines", "matched", "exact", "missed", "spurious", "errors", "chars")}
    if total["gt_lines"] == 0:
        raise ValueError(f"the {len(matches)} page(s) have no ground-truth line to read (every line is one of "
                         f"{IGNORED_TRANSCRIPTIONS} or none is labelled): label some lines, or leave these pages "
                         "out of the system test set")
    return {
        "e2e_line_accuracy_pct": 100.0 * total["exact"] / total["gt_lines"],
        "cer_matched_pct": 100.0 * total["errors"] / total["chars"] if total["chars"] else None,
        "gt_lines": total["gt_lines"], "read_lines": total["read_lines"], "matched_lines": total["matched"],
        "exact_lines": total["exact"], "missed_lines": total["missed"], "spurious_lines": total["spurious"],
        "ignored_reads": sum(sum(match.read_on_ignored) for match in matches),
        "char_errors": total["errors"], "matched_chars": total["chars"],
    }


def system_scores(pages_gt: Sequence[Sequence[dict]], pages_read: Sequence[Sequence[ReadLine]],
                  iou_threshold: float = IOU_THRESHOLD) -> dict:
    """One system's end-to-end scores over pages: e2e_line_accuracy_pct (ground-truth lines found by a box and read
    exactly, over all ground-truth lines), cer_matched_pct (character error rate over the found lines; None when
    none was found), and the line counts gt/read/matched/exact/missed/spurious_lines and ignored_reads.

    Raises:
        ValueError: page counts differ, a line is malformed, or no page has a ground-truth line to read.
    """
    return scores_of(match_pages(pages_gt, pages_read, iou_threshold))


def compare_systems(pages_gt: Sequence[Sequence[dict]], reference_read: Sequence[Sequence[ReadLine]],
                    candidate_read: Sequence[Sequence[ReadLine]], iou_threshold: float = IOU_THRESHOLD) -> dict:
    """The reference (FP32) and candidate (INT8) systems' scores on the same pages, what the candidate lost, and
    the ground-truth lines on which their outcomes differ.

    A line's outcome is the text read for it, or None when no box matched it: the systems agree on a line when
    both missed it or both read the same text (right or wrong), whichever of their boxes did it. Returned keys:
    reference, candidate (system_scores), e2e_line_drop_pts (reference - candidate line accuracy),
    cer_increase_pts (candidate - reference matched CER; None when either is None), line_agreement (fraction of
    ground-truth lines they agree on, 0 to 1), differing_lines [(page, gt index, reference text or None,
    candidate text or None)] in page and line order.

    Raises:
        ValueError: page counts differ, a line is malformed, or no page has a ground-truth line to read.
    """
    if len(reference_read) != len(candidate_read):
        raise ValueError(f"the reference read {len(reference_read)} pages but the candidate {len(candidate_read)}: "
                         "compare the two systems on the same pages")
    reference = match_pages(pages_gt, reference_read, iou_threshold)
    candidate = match_pages(pages_gt, candidate_read, iou_threshold)
    reference_scores, candidate_scores = scores_of(reference), scores_of(candidate)
    differing = [(page, line, ours.readings[line], theirs.readings[line])
                 for page, (ours, theirs) in enumerate(zip(reference, candidate))
                 for line in range(len(ours.readings))
                 if not ours.ignored[line] and ours.readings[line] != theirs.readings[line]]
    reference_cer, candidate_cer = reference_scores["cer_matched_pct"], candidate_scores["cer_matched_pct"]
    return {
        "reference": reference_scores, "candidate": candidate_scores,
        "e2e_line_drop_pts": reference_scores["e2e_line_accuracy_pct"] - candidate_scores["e2e_line_accuracy_pct"],
        "cer_increase_pts": None if reference_cer is None or candidate_cer is None else candidate_cer - reference_cer,
        "line_agreement": 1.0 - len(differing) / reference_scores["gt_lines"],
        "differing_lines": differing,
    }
