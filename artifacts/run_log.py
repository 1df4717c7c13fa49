"""The run log: versions/vN/run.log, the library output of the run that built the version.

It is informational, so it is neither hashed nor listed in version.json, and it may grow after
the version is finalized. It is still inside the store, so it is only ever appended to, and
never through a symlink: a link planted there could make the pipeline write anywhere.
"""

import errno
import os
import stat
from pathlib import Path

from .errors import ArtifactError, ArtifactNotFound
from .manifest import write_all
from .names import VersionRef
from .writer import storage_error

# O_NONBLOCK: opening a FIFO planted at the log's name must fail (ENXIO), not hang the run.
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def append_text(path: Path, ref: VersionRef, text: str, shown: str) -> None:
    """Append `text` to the run log at `path` of the version `ref` and fsync it.

    `shown` is the log's path as messages show it.

    Raises:
        ArtifactNotFound: the version folder does not exist.
        ArtifactError: `text` is not a str, or the log is not a regular file (a symlink, say).
        StoreFull: the store ran out of space.
    """
    label = f"the run log of model {ref.model!r} {ref.version} ({shown})"
    if not isinstance(text, str):
        raise ArtifactError(f"cannot append a {type(text).__name__} to {label}; pass text (a str)")
    if not path.parent.is_dir():
        raise ArtifactNotFound(
            f"cannot append to {label}: the version folder does not exist; create the version "
            "(ArtifactStore.create_version) before logging into it"
        )
    # A log line must never fail the run it describes: characters UTF-8 cannot hold are escaped.
    data = text.encode("utf-8", errors="backslashreplace")
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise _not_a_file(label) from exc
        raise storage_error(exc, f"opening {label}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_a_file(label)
        write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise storage_error(exc, f"appending to {label}") from exc
    finally:
        os.close(fd)


def _not_a_file(label: str) -> ArtifactError:
    return ArtifactError(
        f"{label} is not a regular file (a symlink, folder or pipe); the store never writes through "
        "one: move it aside, then run again (`quantgate fsck` lists it)"
    )
