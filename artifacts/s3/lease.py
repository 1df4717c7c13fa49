"""Leases: how another machine tells a running version from an interrupted one, without flock.

A run holds its version for as long as it writes it (`ArtifactStore.hold_version`). On S3 that
is a heartbeat object, `<model>/versions/vN/lease.json`, rewritten every RENEW_S seconds by a
daemon thread and deleted when the run ends. A lease whose object is older than LEASE_S (the
bucket's own LastModified clock against the reader's, so keep workers' clocks within a few
seconds of the server's) belongs to a run that died: `fsck` then reports the version as
interrupted, and `fsck --repair` deletes the expired lease and the version's unsealed uploads
(the objects of a stage whose manifest never arrived). The version and its sealed stages stay.
"""

import json
import threading
from datetime import datetime, timezone

from ..audit import current_actor
from ..manifest import utc_now
from .objects import ObjectStore

LEASE_S = 90.0
RENEW_S = 15.0


def lease_expired(last_modified: datetime | None, now: datetime | None = None) -> bool:
    """Whether a lease written at `last_modified` has run out (no lease at all counts as expired)."""
    if last_modified is None:
        return True
    now = now or datetime.now(timezone.utc)
    return (now - last_modified).total_seconds() > LEASE_S


class Lease:
    """The heartbeat of one running version: `start()` writes it and renews it, `stop()` deletes it."""

    def __init__(self, objects: ObjectStore, key: str):
        self.objects, self.key = objects, key
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    def _write(self) -> None:
        body = {"holder": current_actor(), "renewed_at": utc_now(), "lease_s": LEASE_S, "renew_s": RENEW_S}
        self.objects.put(self.key, json.dumps(body, sort_keys=True).encode())
        self.renewals += 1

    def start(self) -> None:
        self._write()  # before the block starts: fsck on another machine sees it running from the first second
        self._thread = threading.Thread(target=self._renew, name=f"lease {self.key}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried; the lease outlives a few
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.objects.delete(self.key)
        except Exception:  # noqa: BLE001 - an undeleted lease simply expires
            pass
