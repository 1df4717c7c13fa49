"""How a stage declares what it writes: the file names in its folder and the metric keys of its manifest.

Each stage package spells its names once, in its `outputs.py`; the flow, the CLI, the report and the
Prefect artifact import them from there instead of repeating the strings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageOutputs:
    """What one stage commits: `files` (and folders) inside its stage folder, `metrics` keys in its manifest."""

    stage: str
    description: str
    files: tuple[str, ...]
    metrics: tuple[str, ...] = ()
    optional_files: tuple[str, ...] = ()  # written only in some configurations (image folders, multi-process)
