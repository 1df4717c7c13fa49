"""What a PaddleOCR 3 / PaddleX 3 `inference.yml` (beside a PIR model) says, as quantgate's config settings.

It lives beside config.py, beneath nothing: config validation reads it, and every floor imports the config.

The file describes deployment: `PreProcess.transform_ops` (colour order, resize, normalisation) and `PostProcess`
(CTCLabelDecode's `character_dict`, DBPostProcess's thresholds). A setting the user's config gives wins over the
file (`merge_settings`); the source stage records, per setting, where its value came from (`provenance`).

Read from a recognizer's yml: its dictionary (`data.character_dict`, written once to a content-addressed file,
`data.use_space_char: true`: PaddleOCR's CTC decoder adds the space after the dictionary, so a dictionary of n
characters makes n + 2 outputs), `rec_image_shape`, colour order. It gives no normalisation for the recognizer:
PaddleOCR's is (x/255 - 0.5) / 0.5, which the user's config states. From a detector's: colour order, mean/std,
the resize's side and kind, and the DB post-processing thresholds.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml

from quantgate.errors import BadInput, clipped


class InferenceYmlProblem(BadInput):
    """A PIR model's inference.yml cannot be read; the message names the file and the setting (exit 2)."""


SETTINGS_FILE = "inference.yml"
FROM_YML, FROM_CONFIG = "inference.yml", "config"
DICTIONARY_ENV = "QUANTGATE_DICTIONARIES"  # where the dictionaries read from inference.yml are written
DEFAULT_DICTIONARIES = Path("~/.cache/quantgate/dictionaries")
DB_KEYS = ("thresh", "box_thresh", "unclip_ratio", "max_candidates")
TEXT_TASKS = ("text_recognition",)
DET_TASKS = ("text_detection",)


def _operations(settings: dict) -> dict[str, dict]:
    ops = (settings.get("PreProcess") or {}).get("transform_ops") or []
    found = {}
    for op in ops:
        if isinstance(op, dict) and len(op) == 1:
            (name, args), = op.items()
            found[name] = args or {}
    return found


def _scale(value) -> float:
    if isinstance(value, str):  # "1./255."
        numerator, _, denominator = value.partition("/")
        return float(numerator) / float(denominator or 1)
    return float(value)


def dictionary_file(characters: list[str]) -> Path:
    """The characters, one a line, in a file named by their sha256 (written once, atomically)."""
    text = "".join(f"{character}\n" for character in characters)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]
    folder = Path(os.environ.get(DICTIONARY_ENV) or DEFAULT_DICTIONARIES).expanduser()
    target = folder / f"inference-yml-{digest}.txt"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)
    return target


def read_settings(path: Path, task: str) -> dict[str, object]:
    """`{dotted config key: value}` that `path` (an inference.yml) gives for `task`.

    Raises:
        InferenceYmlProblem: the file is not YAML, or a setting in it cannot be read (named, with its value).
    """
    try:
        settings = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InferenceYmlProblem(f"{path} cannot be read as YAML ({type(exc).__name__}: {clipped(str(exc), 300)}); "
                         "delete it to give every setting in the config instead") from exc
    if not isinstance(settings, dict):
        raise InferenceYmlProblem(f"{path} holds {type(settings).__name__}, not PaddleX's inference.yml mapping")
    ops, post = _operations(settings), settings.get("PostProcess") or {}
    found: dict[str, object] = {}
    try:
        mode = (ops.get("DecodeImage") or {}).get("img_mode")
        if mode in ("BGR", "RGB"):
            found["data.transforms.color"] = mode.lower()
        if task in TEXT_TASKS:
            shape = (ops.get("RecResizeImg") or {}).get("image_shape")
            if shape:
                found["data.transforms.rec_image_shape"] = [int(side) for side in shape]
            if post.get("name") == "CTCLabelDecode" and post.get("character_dict"):
                characters = [str(character) for character in post["character_dict"]]
                found["data.character_dict"] = str(dictionary_file(characters))
                found["data.use_space_char"] = True  # PaddleOCR's CTCLabelDecode adds " " after the dictionary
        if task in DET_TASKS:
            resize = ops.get("DetResizeForTest") or {}
            if "resize_long" in resize:
                found["data.transforms.det_limit_type"] = "resize_long"
                found["data.transforms.det_limit_side_len"] = int(resize["resize_long"])
            elif "limit_side_len" in resize:
                found["data.transforms.det_limit_side_len"] = int(resize["limit_side_len"])
                found["data.transforms.det_limit_type"] = str(resize.get("limit_type", "max"))
            normalize = ops.get("NormalizeImage") or {}
            if normalize.get("mean") and normalize.get("std") and _scale(normalize.get("scale", 1 / 255)) == 1 / 255:
                found["data.transforms.mean"] = [float(value) for value in normalize["mean"]]
                found["data.transforms.std"] = [float(value) for value in normalize["std"]]
            if post.get("name") == "DBPostProcess":
                for key in DB_KEYS:
                    if key in post:
                        found[f"data.det_postprocess.{key}"] = post[key]
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise InferenceYmlProblem(f"{path}: a setting cannot be read ({type(exc).__name__}: {clipped(str(exc), 300)}); "
                         "give it in the config instead, or fix the file") from exc
    return found


def _lookup(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def merge_settings(given: dict, settings: dict[str, object]) -> dict:
    """`given` (the config as the user wrote it) with every setting of `settings` it does not give."""
    merged = {key: (dict(value) if isinstance(value, dict) else value) for key, value in given.items()}
    for dotted, value in settings.items():
        if _lookup(given, dotted) is not _MISSING:
            continue
        node = merged
        *parents, leaf = dotted.split(".")
        for part in parents:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[leaf] = value
    return merged


def provenance(config: dict, settings: dict[str, object]) -> dict[str, dict]:
    """Per setting the yml gives: the value the run uses and where it came from ("inference.yml" or "config")."""
    record = {}
    for dotted, value in sorted(settings.items()):
        used = _lookup(config, dotted)
        same = _same(used, value, dotted)
        record[dotted] = {"value": used if used is not _MISSING else None, "from": FROM_YML if same else FROM_CONFIG}
        if not same:
            record[dotted]["inference_yml"] = value
    return record


def _same(used, value, dotted: str) -> bool:
    if dotted == "data.character_dict" and used is not _MISSING and used is not None:
        try:  # the user's own file with the same characters is the yml's dictionary
            return Path(used).expanduser().read_bytes() == Path(value).read_bytes()
        except OSError:
            return False
    if isinstance(used, (list, tuple)) and isinstance(value, (list, tuple)):
        return [float(a) for a in used] == [float(b) for b in value] if used and isinstance(used[0], float) \
            else list(used) == list(value)
    return used == value


def yml_settings(path: str, prefix: str, task: str) -> dict[str, object]:
    """The settings `<path>/<prefix>.yml` gives for `task` when the folder holds a PIR model (`<prefix>.json`);
    {} for any other folder (a legacy model's settings are the config's alone)."""
    folder = Path(path).expanduser()
    yml, program = folder / f"{prefix}.yml", folder / f"{prefix}.json"
    return read_settings(yml, task) if yml.is_file() and program.is_file() else {}
