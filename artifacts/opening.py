"""Opening a store by what the user wrote: a folder (the local store) or `s3://BUCKET/PREFIX` (the S3 store)."""

import os

from .store import ArtifactStore

S3_SCHEME = "s3://"


def is_s3(spec: str | os.PathLike) -> bool:
    """Whether `spec` names a store in a bucket rather than a folder."""
    return str(spec).startswith(S3_SCHEME)


def open_store(spec: str | os.PathLike) -> ArtifactStore:
    """The store `spec` names: `S3Store` for an s3:// URL (boto3 imported only then), else a local `ArtifactStore`.

    Raises:
        the errors of ArtifactStore() (an unwritable folder) or S3Store() (a bad URL, a missing bucket,
        refused credentials, an unreachable endpoint).
    """
    if is_s3(spec):
        from .s3.store import S3Store

        return S3Store(str(spec))
    return ArtifactStore(spec)
