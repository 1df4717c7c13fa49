"""What happens to a finished version after its run: alias moves (audited) and later gate decisions.

Versions and stages are immutable; these are the store's only changes to a finished version's
standing. An alias is replaced whole in one step and the move is appended to the model's audit
log under the log's lock; a decision is a new numbered, write-once file beside the stages.
"""

from pathlib import Path

from .aliases import write_alias
from .audit import append_line, current_actor, locked_log
from .decisions import append_decision
from .errors import ArtifactError
from .layout import AUDIT_FILE, VERSION_RECORD
from .manifest import OUT_OF_SPACE, to_json_safe, utc_now
from .names import VersionRef, check_alias
from .paths import aliases_dir, model_dir, relative, version_names
from .reading import verify_finalized_version
from .versions import find_version, is_finalized
from .writer import storage_error


def move_alias(root: Path, model: str, alias: str, version: str, reason: str, action: str,
               actor: str | None) -> str | None:
    """Point `alias` at a finalized, intact `version` and audit the move; see ArtifactStore.set_alias."""
    check_alias(alias)
    ref = find_version(root, model, version)
    if not is_finalized(root, model, version):
        finalized = [v for v in version_names(root, model) if is_finalized(root, model, v)]
        raise ArtifactError(
            f"cannot point alias {alias!r} of model {model!r} at {version}: that version is not finalized "
            f"(no {VERSION_RECORD}); finalize it first or choose a finalized version "
            f"({', '.join(finalized) or 'none yet'})"
        )
    verify_finalized_version(root, ref)
    try:
        # The line is appended while the log's lock is held, so concurrent moves are serialized
        # and each line's "from" is where the alias really pointed.
        with locked_log(model_dir(root, model) / AUDIT_FILE) as log:
            previous = write_alias(aliases_dir(root, model), model, alias, version, str(reason), root)
            append_line(log, {
                "at": utc_now(), "who": actor or current_actor(), "model": model, "alias": alias,
                "from": previous, "to": version, "why": str(reason), "action": action,
            })
    except OSError as exc:
        if exc.errno in OUT_OF_SPACE:
            raise storage_error(exc, f"moving alias {alias!r} of model {model!r}") from exc
        raise ArtifactError(
            f"cannot move alias {alias!r} of model {model!r} in {model_dir(root, model)}: "
            f"{exc.strerror or exc}; check that the store is writable"
        ) from exc
    return previous


def record_decision(root: Path, ref: VersionRef, record: dict) -> str:
    """Append a gate decision to the existing version `ref`; see ArtifactStore.record_decision."""
    if not is_finalized(root, ref.model, ref.version):
        raise ArtifactError(
            f"model {ref.model!r} {ref.version} is not finalized; only a finished version can be decided again"
        )
    safe = dict(to_json_safe(record, "decision"), model=ref.model, version=ref.version, who=current_actor())
    try:
        return relative(root, append_decision(Path(ref.path), safe))
    except OSError as exc:
        raise ArtifactError(
            f"cannot record a decision for model {ref.model!r} {ref.version}: {exc.strerror or exc}; "
            "check that the store is writable"
        ) from exc
