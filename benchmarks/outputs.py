"""Where a benchmark's results go: printed, and with --out its JSON and Markdown side by side."""

from __future__ import annotations

import json
from pathlib import Path


def write_results(out: Path | None, name: str, result: dict, text: str) -> None:
    """Print `text`; with `out`, write `out/name.json` (the measurements) and `out/name.md` (`text`)."""
    print(text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        (out / f"{name}.md").write_text(text)
