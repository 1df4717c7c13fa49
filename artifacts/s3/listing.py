"""One LIST of a model's keys, read as the store's layout: claims, versions, stages, leases, audit entries.

    <model>/claims/vN                                   version numbers, each created once (If-None-Match)
    <model>/audit/0000000001.json                       alias moves, entry k+1 created once: the commit point
    <model>/versions/vN/lease.json                      a running version's heartbeat (lease.py)
    <model>/versions/vN/version.json, run.log, decisions/0001.json
    <model>/versions/vN/<stage>/... + manifest.json     a stage: visible once manifest.json (its seal) exists
    <model>/versions/vN/checkpoints/<stage>/<name>/...  a checkpoint, sealed the same way
    .cache/<kind>/<entry>/... + cache-entry.json        the shared search cache, content-addressed

Every other key spells the local store's layout (layout.py), so a stage's keys are its mirror paths.
"""

from dataclasses import dataclass

from ..layout import CHECKPOINTS_DIR, DECISIONS_DIR, VERSION_RECORD, VERSIONS_DIR
from ..manifest import MANIFEST_NAME
from ..names import NAME_PATTERN, RESERVED_STAGE_NAMES, VERSION_PATTERN, version_number
from .objects import Listed

CLAIMS_DIR = "claims"
AUDIT_DIR = "audit"
LEASE_FILE = "lease.json"


def claim_key(model: str, version: str) -> str:
    return f"{model}/{CLAIMS_DIR}/{version}"


def version_key(model: str, version: str) -> str:
    return f"{model}/{VERSIONS_DIR}/{version}"


def audit_key(model: str, number: int) -> str:
    return f"{model}/{AUDIT_DIR}/{number:010d}.json"


@dataclass
class ModelListing:
    """Every object under `<model>/`, keyed by its full key (relative to the store's prefix)."""

    model: str
    objects: dict[str, Listed]

    def get(self, key: str) -> Listed | None:
        return self.objects.get(key)

    def under(self, prefix: str) -> dict[str, Listed]:
        """{path below `prefix`/: Listed} of the folder `prefix`."""
        start = prefix + "/"
        return {key[len(start):]: item for key, item in self.objects.items() if key.startswith(start)}

    def claims(self) -> list[str]:
        """The claimed version names, by number."""
        names = {name for name in self.under(f"{self.model}/{CLAIMS_DIR}") if VERSION_PATTERN.fullmatch(name)}
        return sorted(names, key=version_number)

    def versions(self) -> list[str]:
        """Every version the bucket knows of: claimed, or holding objects (a store written without claims)."""
        found = set(self.claims())
        for relpath in self.under(f"{self.model}/{VERSIONS_DIR}"):
            name = relpath.split("/", 1)[0]
            if VERSION_PATTERN.fullmatch(name):
                found.add(name)
        return sorted(found, key=version_number)

    def stages(self, version: str) -> list[str]:
        """The sealed stages of `version` (their manifest.json is in the bucket), sorted."""
        return sorted(relpath.split("/", 1)[0] for relpath in self.under(version_key(self.model, version))
                      if relpath.count("/") == 1 and relpath.endswith("/" + MANIFEST_NAME)
                      and _is_stage(relpath.split("/", 1)[0]))

    def checkpoints(self, version: str, stage: str) -> list[str]:
        """The sealed checkpoints of `stage` in `version`."""
        folder = f"{version_key(self.model, version)}/{CHECKPOINTS_DIR}/{stage}"
        return sorted(relpath.split("/", 1)[0] for relpath in self.under(folder)
                      if relpath.count("/") == 1 and relpath.endswith("/" + MANIFEST_NAME))

    def decisions(self, version: str) -> dict[str, Listed]:
        """{key: Listed} of the decision files of `version`."""
        folder = f"{version_key(self.model, version)}/{DECISIONS_DIR}"
        return {f"{folder}/{relpath}": item for relpath, item in self.under(folder).items() if "/" not in relpath}

    def record(self, version: str) -> Listed | None:
        return self.get(f"{version_key(self.model, version)}/{VERSION_RECORD}")

    def lease(self, version: str) -> Listed | None:
        return self.get(f"{version_key(self.model, version)}/{LEASE_FILE}")

    def unsealed(self, version: str) -> list[str]:
        """Folders of `version` with objects but no seal: uploads that never finished (a killed worker)."""
        base = version_key(self.model, version)
        folders: dict[str, bool] = {}
        for relpath in self.under(base):
            parts = relpath.split("/")
            if parts[0] == CHECKPOINTS_DIR and len(parts) >= 4:
                folder, rest = "/".join(parts[:3]), parts[3:]
            elif len(parts) >= 2 and _is_stage(parts[0]):
                folder, rest = parts[0], parts[1:]
            else:
                continue
            folders[folder] = folders.get(folder, False) or rest == [MANIFEST_NAME]
        return sorted(f"{base}/{folder}" for folder, sealed in folders.items() if not sealed)

    def audit(self) -> list[tuple[int, Listed]]:
        """(number, Listed) of every audit entry, by number."""
        entries = []
        for relpath, item in self.under(f"{self.model}/{AUDIT_DIR}").items():
            stem = relpath.removesuffix(".json")
            if relpath.endswith(".json") and stem.isdigit():
                entries.append((int(stem), item))
        return sorted(entries, key=lambda pair: pair[0])


def _is_stage(name: str) -> bool:
    return bool(NAME_PATTERN.fullmatch(name)) and name not in RESERVED_STAGE_NAMES and name != CHECKPOINTS_DIR
