"""The names the store spells on disk, each in one place; paths.py turns them into paths.

    <root>/<model>/versions/v1/<stage>/manifest.json + files   committed stages
    <root>/<model>/versions/v1/.staging-<stage>-<hex>/          in progress, invisible to readers
    <root>/<model>/versions/v1/version.json                     the version's final record
    <root>/<model>/versions/v1/run.log                          the run's library output, appended, not hashed
    <root>/<model>/versions/v1/checkpoints/<stage>/<name>/      per-epoch checkpoints (checkpoints.py)
    <root>/<model>/versions/v1/decisions/0001.json              later gate decisions, write-once
    <root>/<model>/aliases/<alias>.json                         e.g. latest, release
    <root>/<model>/audit.jsonl                                  every alias move, appended
    <root>/<model>/next_version                                 the next version number, never reused
    <root>/<model>/versions/v1/.lock, .<entry>.lock             lock files of live writers (locks.py)

This module imports nothing from the package, so every other module (names.py included) can
import the spellings from here without an import cycle.
"""

VERSIONS_DIR = "versions"
ALIASES_DIR = "aliases"
VERSION_RECORD = "version.json"
# Informational: the pipeline appends third-party output here; fsck only checks it is a plain file.
RUN_LOG_FILE = "run.log"
CHECKPOINTS_DIR = "checkpoints"
DECISIONS_DIR = "decisions"
AUDIT_FILE = "audit.jsonl"
# The counter that keeps version numbers from being reused after a version folder is deleted.
NEXT_VERSION_FILE = "next_version"

# The aliases the pipeline moves: "latest" follows every finished run, "release" only runs the
# gate passed (fsck reports a "release" that points at anything else).
LATEST = "latest"
RELEASE = "release"

# `ArtifactStore()` proves a root writable with a file of this prefix (fsck removes one a crash left).
PROBE_PREFIX = ".write-probe-"
