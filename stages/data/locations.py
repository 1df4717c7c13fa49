"""Where a scanned dataset lies on this machine, kept apart from what it is.

A data stage of an image folder, text lines or text boxes is decided by the files' bytes and their paths
relative to `data.path` (the plans' `content_sha256`), not by where `data.path` is mounted: two workers
holding copies of one dataset under different folders reuse each other's data stage, and every stage
after it. The flow records this run's folders in the data stage's config (READ_FROM) and keeps them
out of the stage's reuse digest; the stages after it read each file relative to those folders
(`reading.open_data`), so a data stage committed on another machine still finds this machine's files.
"""

from __future__ import annotations

from pathlib import Path

from quantgate.config import FILE_DATASETS, DataConfig

# The data settings that name files or folders; what those hold is in the scan's content digest.
LOCATIONS = ("path", "test_path", "label_file", "test_label_file", "character_dict")
# How many processes scan and decode on this machine: a worker's own choice, never in the stage's output.
MACHINE_SETTINGS = ("scan_workers", "num_workers")


def data_roots(config: DataConfig) -> dict[str, str]:
    """The absolute folder of each root a file table names ("path", and "test_path" when set)."""
    roots = {key: getattr(config, key) for key in ("path", "test_path") if getattr(config, key) is not None}
    return {key: str(Path(value).expanduser().resolve()) for key, value in roots.items()}


def without_locations(config: DataConfig, settings: dict) -> dict:
    """`settings` (the data stage's config) as its reuse digest takes them: for a scanned dataset each location
    only as whether it is set (a test folder or a dictionary changes what is read), never where it is, and
    without the machine's process counts. The built-in datasets are unchanged: a character_dict of
    digit_strings is read by the stage, not scanned."""
    if config.dataset not in FILE_DATASETS:
        return settings
    located = {key: settings[key] is not None for key in LOCATIONS if key in settings}
    return {key: value for key, value in {**settings, **located}.items() if key not in MACHINE_SETTINGS}
