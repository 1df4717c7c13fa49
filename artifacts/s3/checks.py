"""`fsck` of a store in a bucket: what only the bucket can show, then the local checks on the mirror.

`remote_problems` lists every model's keys, fetches every sealed folder into the mirror (so the
local fsck that follows re-hashes every byte the bucket holds against its manifest), verifies the
audit log, and reports what the bucket alone can tell:

- `unsealed-upload`: objects of a stage or checkpoint whose seal never arrived (a worker killed, or
  the server lost, mid-upload), in a version no live lease holds: `fsck --repair` deletes them;
- `expired-lease`: the heartbeat of a run that died (a warning; the version is reported as
  interrupted): `fsck --repair` deletes it;
- `abandoned-multipart`: a multipart upload older than a lease that never completed (its parts take
  space and no listing shows them): `fsck --repair` aborts it;
- damage met while fetching (a sealed folder whose objects cannot be read), as errors.

The mirror's aliases and audit.jsonl are then written from the bucket's log, so the local checks of
aliases (a dangling alias, a `release` that did not pass) judge what the bucket says.
"""

import json

from ..aliases import write_alias
from ..errors import ArtifactCorrupt, ArtifactError
from ..fsck_entries import Problem
from ..layout import AUDIT_FILE, CHECKPOINTS_DIR
from ..manifest import MANIFEST_NAME, replace_file
from .lease import LEASE_S, lease_expired
from .listing import ModelListing, version_key

UNSEALED, EXPIRED, ABANDONED = "unsealed-upload", "expired-lease", "abandoned-multipart"
_UPLOAD_ID = "?uploadId="


def remote_problems(store, model: str | None = None) -> list[Problem]:
    problems = []
    for name in [model] if model else store.models():
        listing = store.listing(name)
        problems += _check_log(store, name, listing)
        for version in listing.versions():
            problems += _check_version(store, listing, version)
        problems += _abandoned_uploads(store, listing)
    return problems


def _abandoned_uploads(store, listing: ModelListing) -> list[Problem]:
    """Multipart uploads a killed worker (or a dead server) never completed: their parts take space, unseen."""
    problems = []
    for key, upload_id, initiated in store.objects.uploads(f"{listing.model}/"):
        parts = key.split("/")
        lease = listing.lease(parts[2]) if len(parts) > 2 and parts[1] == "versions" else None
        if lease_expired(initiated) and (lease is None or lease_expired(lease.modified)):
            problems.append(Problem(ABANDONED, f"{store.objects.full(key)}{_UPLOAD_ID}{upload_id}",
                                    f"a multipart upload started {initiated:%Y-%m-%d %H:%M:%S} UTC and never "
                                    "completed (its parts take space, no reader sees them); `fsck --repair` aborts it",
                                    repairable=True))
    return problems


def _check_log(store, model: str, listing: ModelListing) -> list[Problem]:
    try:
        entries = store.audit_entries(model, listing)
    except ArtifactCorrupt as exc:
        return [Problem("malformed-audit-log", f"{model}/audit", str(exc))]
    # The local checks read the mirror's alias files and log: write them as the bucket's log says.
    held = {}
    for entry in entries:
        held[entry["alias"]] = entry
    folder = store.root / model
    replace_file(folder / AUDIT_FILE, b"".join(json.dumps(e, sort_keys=True).encode() + b"\n" for e in entries))
    for alias, entry in sorted(held.items()):
        write_alias(folder / "aliases", model, alias, entry["to"], str(entry.get("why", "")), entry.get("from"),
                    entry["move_id"])
    return []


def _check_version(store, listing: ModelListing, version: str) -> list[Problem]:
    model, base = listing.model, version_key(listing.model, version)
    problems = []
    for stage in listing.stages(version):
        problems += _fetch(store, f"{base}/{stage}", listing)
    for key in sorted(listing.under(f"{base}/{CHECKPOINTS_DIR}")):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == MANIFEST_NAME:
            problems += _fetch(store, f"{base}/{CHECKPOINTS_DIR}/{parts[0]}/{parts[1]}", listing)
    lease = listing.lease(version)
    live = lease is not None and not lease_expired(lease.modified)
    if lease is not None and not live:
        problems.append(Problem(EXPIRED, store.objects.full(lease.key), f"the lease of {model} {version} expired "
                                f"at {lease.modified:%Y-%m-%d %H:%M:%S} UTC + its {int(LEASE_S)} s: its run died; "
                                "`fsck --repair` deletes it", severity="warning", repairable=True))
    if not live:
        for prefix in listing.unsealed(version):
            count = len(listing.under(prefix))
            problems.append(Problem(UNSEALED, store.objects.full(prefix),
                                    f"{count} object(s) uploaded without their {MANIFEST_NAME}: an upload that never "
                                    "finished (no reader sees it); `fsck --repair` deletes them", repairable=True))
    return problems


def _fetch(store, prefix: str, listing: ModelListing) -> list[Problem]:
    try:
        store.mirror.hydrate_sealed(prefix, MANIFEST_NAME, prefix, listing.under(prefix))
    except ArtifactError as exc:
        return [Problem("unreadable-object", store.objects.full(prefix), str(exc))]
    return []


def repair_remote(store, problem: Problem) -> bool:
    """Delete what `problem` (an unsealed upload, an expired lease) names in the bucket; whether it did."""
    key = problem.path.removeprefix(store.objects.full("")).lstrip("/")
    if problem.kind == EXPIRED:
        store.objects.delete(key)
        return True
    if problem.kind == ABANDONED:
        key, upload_id = key.split(_UPLOAD_ID, 1)
        store.objects.abort_upload(key, upload_id)
        return True
    if problem.kind == UNSEALED:
        store.objects.delete_many([item.key for item in store.objects.list(key + "/")])
        store.mirror.forget(key)
        return True
    return False
