"""Text-line recognition with CTC: a dictionary of characters, greedy decoding, line accuracy and CER.

Index 0 of the model's last axis is the CTC blank, as in PaddleOCR; entry `i` of the dictionary is
index `i + 1` (an entry is one character, or several code points matched whole: `split_entries`). The same decoding runs on FP32 and INT8 outputs, so their strings compare like for like.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from rapidfuzz.distance import Levenshtein

BLANK = 0


def split_entries(text: str, entries: Mapping[str, object]) -> list[str]:
    """`text` cut into dictionary entries by greedy longest match; a code point no entry starts with stays alone.

    PaddleOCR's dictionaries hold entries of several code points (PP-OCRv5's flag emojis, e.g. 🇩🇪: two regional
    indicators), which its CTC label encoder matches whole; with single code points only this is `list(text)`.
    """
    longest = max(map(len, entries), default=1)
    if longest == 1:
        return list(text)
    pieces, start = [], 0
    while start < len(text):
        size = next((size for size in range(min(longest, len(text) - start), 1, -1)
                     if text[start:start + size] in entries), 1)
        pieces.append(text[start:start + size])
        start += size
    return pieces


def encode(text: str, index: dict[str, int], length: int) -> np.ndarray:
    """`text` as dictionary indices (1-based; 0 pads to `length`), entries matched greedily longest first
    (`split_entries`: never more ids than code points). The caller has checked every entry."""
    ids = np.zeros(length, np.int64)
    pieces = split_entries(text, index)
    ids[:len(pieces)] = [index[piece] for piece in pieces]
    return ids


def greedy_decode(outputs: np.ndarray, characters: tuple[str, ...]) -> np.ndarray:
    """Best path of each [T, C] score sequence in `outputs` [N, T, C]: repeats merged, blanks dropped, the entries'
    strings joined (an entry may be several code points)."""
    best = np.asarray(outputs).argmax(axis=-1)
    lines = []
    for path in best:
        keep = np.ones(len(path), bool)
        keep[1:] = path[1:] != path[:-1]
        lines.append("".join(characters[k - 1] for k in path[keep & (path != BLANK)]))
    return np.asarray(lines, dtype=str) if lines else np.zeros(0, dtype="<U1")


def character_error_rate_pct(references: np.ndarray, predicted: np.ndarray) -> float:
    """Edit distance summed over the lines, over the references' summed length, in percent."""
    total = sum(len(reference) for reference in references)
    errors = sum(Levenshtein.distance(str(reference), str(line)) for reference, line in zip(references, predicted))
    return float(100.0 * errors / total) if total else float("nan")


def character_errors(references: np.ndarray, predicted: np.ndarray) -> dict[str, dict[str, int]]:
    """Per reference character: how often it occurs, and how often it was substituted or dropped."""
    seen, missed = Counter(), Counter()
    for reference, line in zip(map(str, references), map(str, predicted)):
        seen.update(reference)
        for operation in Levenshtein.editops(reference, line):
            if operation.tag in ("replace", "delete"):
                missed[reference[operation.src_pos]] += 1
    return {character: {"count": seen[character], "errors": missed[character]} for character in sorted(seen)}


@dataclass(frozen=True)
class TextRecognition:
    characters: tuple[str, ...]
    name: str = "text_recognition"
    accuracy_name: str = "line accuracy"

    keeps_outputs: bool = True
    stores_outputs: bool = False  # [steps, characters] per line (1 MB for PP-OCRv4's 6,625): decoded strings only

    def predict(self, outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
        return greedy_decode(outputs, self.characters)

    def scores(self, references: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
        line_accuracy = float(100.0 * np.mean(predicted == references)) if len(references) else float("nan")
        return {"top1_pct": line_accuracy, "cer_pct": character_error_rate_pct(references, predicted)}

    def per_sample(self, references: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        return (np.asarray(predicted) == np.asarray(references)).astype(np.float64)

    def compare(self, references: np.ndarray, fp32: np.ndarray, int8: np.ndarray) -> dict:
        fp32_scores, int8_scores = self.scores(references, fp32), self.scores(references, int8)
        return {
            "fp32_top1_pct": fp32_scores["top1_pct"],
            "int8_top1_pct": int8_scores["top1_pct"],
            "accuracy_delta_pts": int8_scores["top1_pct"] - fp32_scores["top1_pct"],
            "agreement": float(np.mean(fp32 == int8)) if len(fp32) else float("nan"),
            "fp32_cer_pct": fp32_scores["cer_pct"],
            "int8_cer_pct": int8_scores["cer_pct"],
            "cer_increase_pts": int8_scores["cer_pct"] - fp32_scores["cer_pct"],
        }
