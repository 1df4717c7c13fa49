"""What a system read: each line (box, text, confidence) and each page with the time its parts took."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LineRead:
    """One line a system read: its box in page pixels, the text, and the recognizer's confidence."""

    points: np.ndarray  # [4, 2] int64 (x, y), clockwise from the top-left
    text: str
    score: float  # mean over the decoded steps of the step's highest probability (PaddleOCR's rec score)
    flipped: bool  # the classifier turned the crop by 180 degrees


@dataclass(frozen=True)
class PageRead:
    """What a system read on one page, in reading order, and how long each part took (ms, wall time)."""

    lines: tuple[LineRead, ...]
    detection_ms: float  # page input, detector, DB post-processing, box filtering and reading order
    crops_ms: float  # cutting the crops straight and classifying their direction
    recognition_ms: float  # the crops' recognizer input, the recognizer and CTC decoding
    total_ms: float  # the whole page (the three parts, plus ordering and bookkeeping)
    boxes: int  # boxes kept after detection, before drop_score
    squeezed: int  # crops wider than the recognizer's input, squeezed to its width
    flipped: int  # crops the classifier turned
    dropped: int  # lines read with a confidence below drop_score, left out of `lines`

    def pairs(self) -> list[tuple[np.ndarray, str]]:
        """The lines as `matching` takes them: [(points, text)]."""
        return [(line.points, line.text) for line in self.lines]
