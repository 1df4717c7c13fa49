"""Where the artifact store lives when the user does not say."""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "QUANTGATE_STORE"


S3_SCHEME = "s3://"


def resolve_store_root(explicit: str | os.PathLike | None = None) -> Path | str:
    """`--store DIR` wins, then $QUANTGATE_STORE, then ~/.quantgate/store.

    A value starting with s3:// names a store in a bucket and comes back as that string, unchanged.
    """
    value = explicit or os.environ.get(STORE_ENV)
    if value and str(value).startswith(S3_SCHEME):
        return str(value)
    if value:
        return Path(value).expanduser().absolute()
    return Path.home() / ".quantgate" / "store"
