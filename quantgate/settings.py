"""Where the artifact store lives when the user does not say."""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "QUANTGATE_STORE"


def resolve_store_root(explicit: str | os.PathLike | None = None) -> Path:
    """`--store DIR` wins, then $QUANTGATE_STORE, then ~/.quantgate/store."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser().absolute()
    return Path.home() / ".quantgate" / "store"
