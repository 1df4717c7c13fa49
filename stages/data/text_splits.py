"""The data stage for text recognition: text lines on disk (a file table) or the built-in digit strings (arrays).

Each writes its table or arrays and the dictionary (`characters.txt`, PaddleOCR's format) into the
stage folder and returns the dataset record (`dataset.json`, the contract every later stage reads
through `reading.open_data`) with the manifest's metrics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from quantgate.config import DataConfig, TransformsConfig
from quantgate.samples.augment import augmentation_record
from quantgate.samples.file_table import content_fingerprint, write_table
from quantgate.samples.text_reading import text_preprocessing_record
from quantgate.stages.data.digit_strings import BACKGROUND_NOTE, line_counts, make_digit_strings
from quantgate.stages.data.outputs import (
    DICTIONARY_FILE,
    MAX_TEXT_LENGTH,
    NUM_CHARACTERS,
    PREPROCESSING,
    SKIPPED_LINES,
    SOURCE,
    SPLITS_FILE,
    TABLE_FILE,
    VALIDATION_RULE,
)
from quantgate.stages.data.stratify import SPLIT_NAMES
from quantgate.stages.data.text_lines import TextPlan
from quantgate.stages.shared.digests import arrays_sha256

TEXT_RECOGNITION = "text_recognition"
PAD_NOTE = "the median of the resized line's last pixel column (its background)"


def write_dictionary(out_dir: Path, characters: tuple[str, ...]) -> None:
    """characters.txt: one character per line, as PaddleOCR's dictionaries (id = line number, 0 = blank)."""
    (Path(out_dir) / DICTIONARY_FILE).write_text("".join(f"{character}\n" for character in characters),
                                                 encoding="utf-8")


def line_transforms(config: DataConfig) -> TransformsConfig:
    """The transforms as applied to text lines: the colour follows rec_image_shape's C (1 grayscale, 3 RGB or,
    when set, BGR)."""
    channels, color = config.transforms.rec_image_shape[0], config.transforms.color
    return config.transforms.model_copy(update={"color": "grayscale" if channels == 1 else
                                                ("bgr" if color == "bgr" else "rgb")})


def _text_spec(config: DataConfig, characters: tuple[str, ...], max_text_length: int, kind: str) -> dict:
    return {"task": TEXT_RECOGNITION, "kind": kind, "dataset": config.dataset, "characters": list(characters),
            "num_classes": len(characters) + 1, "max_text_length": max_text_length,
            "input_shape": list(config.transforms.rec_image_shape), "seed": config.seed,
            "transforms": line_transforms(config).model_dump(mode="json")}


def prepare_text_lines(config: DataConfig, out_dir: Path, plan: TextPlan) -> tuple[dict, dict]:
    """Write the file table and dictionary of scanned text lines; (dataset record, metrics)."""
    write_table(Path(out_dir) / TABLE_FILE, plan.rows)
    write_dictionary(out_dir, plan.characters)
    spec = {**_text_spec(config, plan.characters, plan.max_text_length, "files"), "roots": plan.roots,
            "augment": config.augment.model_dump(mode="json"), "too_wide": config.too_wide,
            "dictionary": plan.dictionary}
    identity = {key: spec[key] for key in ("task", "dataset", "characters", "transforms")}
    counts = {name: sum(row.split == name for row in plan.rows) for name in SPLIT_NAMES}
    source = {**plan.roots, "label_files": plan.label_files, "dictionary": plan.dictionary, "files": len(plan.rows),
              "bytes": sum(row.size for row in plan.rows), "table_sha256": plan.table_sha256}
    return spec, {
        "fingerprint_sha256": content_fingerprint(plan.rows, identity),
        "num_classes": len(plan.characters) + 1,
        NUM_CHARACTERS: len(plan.characters),
        MAX_TEXT_LENGTH: plan.max_text_length,
        "input_shape": spec["input_shape"],
        **{f"samples_{name}": counts[name] for name in SPLIT_NAMES},
        SOURCE: source,
        PREPROCESSING: text_preprocessing_record(line_transforms(config), PAD_NOTE),
        "augmentation": augmentation_record(config.augment, config.seed),
        SKIPPED_LINES: plan.skipped,
        "skipped_images": plan.skipped_images,
        "squeezed_lines": plan.squeezed,
        VALIDATION_RULE: plan.validation_rule,
    }


def prepare_digit_strings(config: DataConfig, out_dir: Path) -> tuple[dict, dict]:
    """Generate, write and describe the built-in digit strings; (dataset record, metrics).

    Raises:
        BadTextLines: data.character_dict is unusable or misses a digit.
    """
    arrays, characters = make_digit_strings(config)
    np.savez(Path(out_dir) / SPLITS_FILE, **arrays)  # uncompressed: zlib would take seconds over ~100 MB
    write_dictionary(out_dir, characters)
    max_text_length = int(arrays["y_train"].shape[1])
    spec = {**_text_spec(config, characters, max_text_length, "arrays"),
            "digit_strings": config.digit_strings.model_dump(mode="json")}
    source_digits = {name: len(np.unique(arrays[f"sources_{name}"][arrays[f"sources_{name}"] >= 0]))
                     for name in SPLIT_NAMES}
    return spec, {
        "fingerprint_sha256": arrays_sha256(arrays),
        "num_classes": len(characters) + 1,
        NUM_CHARACTERS: len(characters),
        MAX_TEXT_LENGTH: max_text_length,
        "input_shape": spec["input_shape"],
        **{f"samples_{name}": count for name, count in line_counts(config).items()},
        SOURCE: {"digits": "scikit-learn load_digits (1,797 real 8x8 handwritten digits, each in one split only)",
                 "source_digits_used": source_digits, **config.digit_strings.model_dump(mode="json")},
        PREPROCESSING: text_preprocessing_record(line_transforms(config), BACKGROUND_NOTE),
        SKIPPED_LINES: [],
    }
