"""Opening a bundle: every file re-hashed against the sealed `bundle.json` before anything is loaded.

A bundle travels to machines the store never sees, so nothing in it is trusted until it matches
its manifest exactly: no file missing, none extra, none changed, no link, and the manifest itself
unedited. `open_bundle` reports every problem at once, naming each file.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from quantgate.bundle.layout import (
    BUNDLE_FILE,
    CLASSES_FILE,
    CLASSIFICATION,
    CLASSIFIER,
    DETECTOR,
    DICTIONARY_FILE,
    FORMAT,
    FORMAT_VERSION,
    KNOWN_RUNTIMES,
    OCR_SYSTEM,
    PRECISIONS,
    PREPROCESSING_FILE,
    RECOGNIZER,
    SYSTEM_FILE,
    TASKS,
    TEXT_DETECTION,
    TEXT_RECOGNITION,
)
from quantgate.bundle.manifest import seal_matches, sha256_file
from quantgate.errors import BadInput

SHOWN_PROBLEMS = 10
# An OCR system's components, the task each must have, and the key of the file naming its outputs (None: none).
COMPONENT_FILES = {DETECTOR: (TEXT_DETECTION, None), CLASSIFIER: (CLASSIFICATION, "classes"),
                   RECOGNIZER: (TEXT_RECOGNITION, "characters")}
OPTIONAL_COMPONENTS = (CLASSIFIER,)


class BundleInvalid(BadInput):
    """The folder is not a bundle, or its files do not match its manifest (exit 2)."""


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle folder whose every file matched `bundle.json` when it was opened."""

    root: Path
    manifest: dict

    @property
    def label(self) -> str:
        return f"{self.manifest['model']}/{self.manifest['version']}"

    @property
    def runtimes(self) -> list[str]:
        return list(self.manifest["runtimes"])

    @property
    def task(self) -> str:
        """"classification" (bundles from before tasks too), "text_recognition", "text_detection" or "ocr_system"."""
        return str(self.manifest.get("task", CLASSIFICATION))

    def component(self, name: str) -> dict | None:
        """An OCR system bundle's entry for component `name` (None: the system has no such component)."""
        return self.manifest.get("components", {}).get(name)

    def model_files(self, runtime: str, precision: str) -> list[Path]:
        """The files `runtime` loads for `precision`, the one to load first."""
        return [self.root / path for path in self.manifest["runtimes"][runtime][precision]]

    def read_bytes(self, name: str) -> bytes:
        """A small file of the bundle, whose sha256 was checked as it was read."""
        data = (self.root / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.manifest["files"][name]["sha256"]:
            raise BundleInvalid(f"bundle {self.root}: {name} changed while it was being read; {_FIX}")
        return data

    def read_json(self, name: str) -> object:
        """A small JSON file of the bundle, parsed from bytes whose sha256 was checked as they were read."""
        return json.loads(self.read_bytes(name))

    def characters(self, name: str = DICTIONARY_FILE) -> tuple[str, ...]:
        """A text recognizer's dictionary (characters.txt), in id order: output index k is character k - 1."""
        return tuple(self.read_bytes(name).decode("utf-8").removesuffix("\n").split("\n"))

    def classes(self, name: str = CLASSES_FILE) -> list[str]:
        return [str(item) for item in self.read_json(name)]

    def preprocessing(self, name: str = PREPROCESSING_FILE) -> dict:
        return dict(self.read_json(name))


_FIX = ("it was changed or damaged after `quantgate bundle` wrote it; make it again from the store with "
        "`quantgate bundle VERSION --out NEW_DIR` (or copy it again from where it came from). Nothing was run")


def open_bundle(folder: Path) -> VerifiedBundle:
    """The bundle in `folder`, once its manifest is intact and every file matches it.

    Raises:
        BundleInvalid: the folder holds no readable bundle.json, the manifest was edited or comes from
            a newer quantgate, or a file is missing, extra, a link, or differs from its recorded sha256.
    """
    root = Path(folder).expanduser()
    manifest = _read_manifest(root)
    listed = manifest["files"]
    found, links = _walk(root)
    problems = [f"{path} is a symbolic link (a bundle holds plain files only)" for path in links]
    problems += [f"{path} is not listed in {BUNDLE_FILE} (an extra file)" for path in sorted(found - set(listed))]
    problems += [f"{path} is missing" for path in sorted(set(listed) - found - set(links))]
    for path in sorted(set(listed) & found):
        sha256, size = sha256_file(root / path)
        if (sha256, size) != (listed[path]["sha256"], listed[path]["bytes"]):
            problems.append(f"{path} does not match {BUNDLE_FILE} (sha256 {sha256[:12]}…, {size} bytes; recorded "
                            f"{listed[path]['sha256'][:12]}…, {listed[path]['bytes']} bytes)")
    if problems:
        shown = problems[:SHOWN_PROBLEMS] + ([f"... and {len(problems) - SHOWN_PROBLEMS} more"]
                                             if len(problems) > SHOWN_PROBLEMS else [])
        raise BundleInvalid(f"refusing bundle {root}: " + "; ".join(shown) + f". {_FIX}")
    return VerifiedBundle(root, manifest)


def _read_manifest(root: Path) -> dict:
    where = root / BUNDLE_FILE
    if not root.is_dir():
        raise BundleInvalid(f"no bundle at {root}: the path {'is not a folder' if root.exists() else 'does not exist'}; "
                            "pass the folder `quantgate bundle --out DIR` wrote")
    try:
        manifest = json.loads(where.read_bytes())
    except FileNotFoundError:
        raise BundleInvalid(f"{root} is not a bundle: it holds no {BUNDLE_FILE}; pass the folder "
                            "`quantgate bundle --out DIR` wrote") from None
    except (OSError, ValueError) as exc:
        raise BundleInvalid(f"{where} cannot be read as JSON ({exc}); {_FIX}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleInvalid(f"{where} is not a quantgate bundle manifest (no \"format\": \"{FORMAT}\"); pass the "
                            "folder `quantgate bundle --out DIR` wrote")
    if not seal_matches(manifest):
        raise BundleInvalid(f"{where} was edited after it was written (its seal does not match its content); {_FIX}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BundleInvalid(f"{where} has format version {version!r}; this quantgate reads version {FORMAT_VERSION} "
                            "and older: upgrade quantgate to read it")
    _check_listing(where, manifest)
    return manifest


def _check_listing(where: Path, manifest: dict) -> None:
    """The manifest's paths stay inside the bundle and every runtime's files are listed (a sealed but
    hand-made manifest must not make predict read outside the folder)."""
    files, runtimes = manifest.get("files"), manifest.get("runtimes")
    if not isinstance(files, dict) or not isinstance(runtimes, dict) or not runtimes:
        raise BundleInvalid(f"{where} lists no files or no runtimes; {_FIX}")
    for path, entry in files.items():
        parts = PurePosixPath(path).parts
        if PurePosixPath(path).is_absolute() or ".." in parts or "\\" in path or path == BUNDLE_FILE:
            raise BundleInvalid(f"{where} lists {path!r}, which is not a path inside the bundle; {_FIX}")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                or not isinstance(entry.get("bytes"), int):
            raise BundleInvalid(f"{where} records no sha256 and size for {path!r}; {_FIX}")
    for runtime, forms in runtimes.items():
        if runtime not in KNOWN_RUNTIMES:
            raise BundleInvalid(f"{where} holds runtime {runtime!r}, which this quantgate does not know (it knows "
                                f"{', '.join(KNOWN_RUNTIMES)}); upgrade quantgate to read it")
        if not isinstance(forms, dict) or any(
                not isinstance(forms.get(precision), list) or not forms[precision]
                or any(path not in files for path in forms[precision]) for precision in PRECISIONS):
            raise BundleInvalid(f"{where} describes runtime {runtime!r} with files it does not list; {_FIX}")
    task = manifest.get("task", CLASSIFICATION)
    if task not in TASKS:
        raise BundleInvalid(f"{where} holds a model for task {task!r}, which this quantgate does not know; upgrade "
                            "quantgate to read it")
    if task == OCR_SYSTEM:
        _check_components(where, manifest)
        return
    required = {TEXT_RECOGNITION: (DICTIONARY_FILE,), TEXT_DETECTION: ()}.get(task, (CLASSES_FILE,))
    for name in (*required, PREPROCESSING_FILE):
        if name not in files:
            raise BundleInvalid(f"{where} lists no {name}; {_FIX}")


def _check_components(where: Path, manifest: dict) -> None:
    """An OCR system's components each name their task and files, and every file is listed."""
    files, components = manifest["files"], manifest.get("components")
    if not isinstance(components, dict) or SYSTEM_FILE not in files:
        raise BundleInvalid(f"{where} describes an OCR system without its components or {SYSTEM_FILE}; {_FIX}")
    for name, (task, names_key) in COMPONENT_FILES.items():
        entry = components.get(name)
        if entry is None and name in OPTIONAL_COMPONENTS:
            continue
        if not _component_listed(entry, task, names_key, files):
            raise BundleInvalid(f"{where} describes the system's {name} without the files of a {task} model that it "
                                f"lists; {_FIX}")
    for key in ("drop_score", "cls_thresh"):
        if not isinstance(manifest.get(key), (int, float)) or isinstance(manifest.get(key), bool):
            raise BundleInvalid(f"{where} records no {key} for its OCR system; {_FIX}")


def _component_listed(entry: object, task: str, names_key: str | None, files: dict) -> bool:
    if not isinstance(entry, dict) or entry.get("task") != task:
        return False
    models = entry.get("models")
    if not isinstance(models, dict) or sorted(models) != sorted(PRECISIONS):
        return False
    paths = [*models.values(), entry.get("preprocessing"), *([entry.get(names_key)] if names_key else [])]
    return all(isinstance(path, str) and path in files for path in paths)


def _walk(root: Path) -> tuple[set[str], list[str]]:
    """Every plain file under `root` (but bundle.json) as a "/"-separated relative path, and every link."""
    files, links = set(), []
    for folder, dirs, names in os.walk(root):
        for name in sorted(dirs):
            if (Path(folder) / name).is_symlink():  # os.walk does not follow it: report it instead
                links.append((Path(folder) / name).relative_to(root).as_posix())
        for name in names:
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                links.append(relative)
            elif relative != BUNDLE_FILE:
                files.add(relative)
    return files, sorted(links)
