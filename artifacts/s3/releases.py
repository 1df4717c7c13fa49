"""`S3Store`'s alias and decision methods: the audit entries in the bucket are the aliases (moves.py), decisions are
created once in the bucket, and a version is `release`-worthy only as the bucket holds it."""

from collections.abc import Iterator
from contextlib import contextmanager

from .. import releases
from ..errors import ArtifactError, ArtifactNotFound
from ..layout import VERSION_RECORD
from ..manifest import read_regular
from ..names import VersionRef, check_model
from .listing import ModelListing, version_key
from .moves import S3AliasMoves, parse_entries, target


class S3AliasesAndDecisions:
    """Mixed into S3Store before ArtifactStore (whose methods `super()` reaches): S3Store supplies `objects`,
    `mirror`, `url`, `root`, `listing`, `version`, `_writing` and `_hydrate_version`."""

    def audit_entries(self, model: str, listing: ModelListing | None = None) -> list[dict]:
        """The model's audit entries, each verified, oldest first (the mirror keeps the ones it read)."""
        listing = listing or self.listing(model)
        numbered = []
        for number, item in listing.audit():
            numbered.append((number, read_regular(self.mirror.follow(item.key, item))))
        return parse_entries(model, numbered, lambda number: self.objects.full(f"{model}/audit/{number:010d}.json"))

    def create_entry(self, key: str, data: bytes) -> bool:
        return self.mirror.put_new(key, data)

    def check_target(self, model: str, alias: str, version: str) -> None:
        """As on disk, but finalized means finalized in the bucket: an alias names only what every worker can read."""
        if not self._is_finalized(model, version):
            raise ArtifactError(f"cannot point alias {alias!r} of model {model!r} at {version}: that version is not "
                                f"finalized in {self.url} (no {VERSION_RECORD}); finalize it first or choose a "
                                "finalized version")
        self._hydrate_version(model, version)
        releases._check_target(self.root, model, alias, version)

    def _is_finalized(self, model: str, version: str) -> bool:
        return self.objects.head(f"{version_key(model, version)}/{VERSION_RECORD}") is not None

    def set_alias(self, model, alias, version, reason="", action="set", actor=None, expected_previous=releases.ANY):
        self.version(model, version)  # an unknown model or version is refused before anything is read
        moves = S3AliasMoves(self, model, decided=expected_previous is not releases.ANY)
        return moves.move(alias, version, reason, action, actor, expected_previous)

    @contextmanager
    def alias_moves(self, model: str) -> Iterator[S3AliasMoves]:
        if not self.listing(check_model(model)).versions():
            raise ArtifactNotFound(f"model {model!r} has no versions in store {self.url}; run the pipeline first")
        yield S3AliasMoves(self, model)

    def alias(self, model: str, alias: str) -> str | None:
        return target(self.audit_entries(model), alias)[0]

    def audit_log(self, model: str) -> list[dict]:
        return self.audit_entries(model)

    def record_decision(self, version_ref: VersionRef, record: dict) -> str:
        while True:
            ref = self.version(version_ref.model, version_ref.version)
            with self._writing(ref):
                shown = super().record_decision(ref, record)
                path = self.root / shown
                try:
                    if self.mirror.put_new(shown, read_regular(path)):  # keys spell the mirror's relative paths
                        return shown
                except BaseException:
                    path.unlink(missing_ok=True)  # not recorded until the bucket holds it
                    raise
                path.unlink(missing_ok=True)  # another worker took that number: read theirs, take the next

    def decisions(self, version_ref: VersionRef) -> list[dict]:
        return super().decisions(self.version(version_ref.model, version_ref.version))

    def release_verdict(self, version_ref: VersionRef) -> tuple[bool, str]:
        try:
            self._hydrate_version(version_ref.model, version_ref.version)
        except ArtifactError as exc:
            return False, f"its gate record cannot be read or verified: {exc}"
        return super().release_verdict(version_ref)
