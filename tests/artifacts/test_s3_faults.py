"""The S3 store when the server fails it: killed mid-upload, refusing the credentials, missing the bucket,
not there at all; and a worker killed between its local commit and the upload.

Each failure must be a named store error with the exit code a CI job can act on, leave nothing any
reader takes for committed, and let a rerun go on from what was committed before it. The servers
here are this module's own (in a tmp folder), so killing one cannot hurt another test's buckets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import BotoCoreError, ClientError

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.seaweed import SeaweedServer, free_ports  # noqa: E402

from quantgate.artifacts import ArtifactError, ArtifactNotFound  # noqa: E402
from quantgate.artifacts.fsck import check_store, repair  # noqa: E402
from quantgate.artifacts.s3.listing import version_key  # noqa: E402
from quantgate.artifacts.s3.objects import ObjectStore, S3AccessDenied, S3BucketMissing, S3Unreachable  # noqa: E402
from quantgate.artifacts.s3.store import S3Store  # noqa: E402

MIB = 1024 * 1024
# Read by boto3 from a developer's environment; they would override the server's settings.
_CLEARED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of this module's own, which its tests kill and restart."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed-faults")).start()
    yield server
    server.kill()  # its data is thrown away: no need for weed's slow graceful stop


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A server that accepts only its own key pair (an -s3.config identities file)."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed-faults-identities"), identities=True).start()
    yield server
    server.kill()


def use_server(monkeypatch, server: SeaweedServer, **overrides: str) -> None:
    """Point boto3's settings chain (os.environ) at `server` for this test, with `overrides` on top."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**server.env(), **overrides}.items():
        monkeypatch.setenv(name, value)


def commit(store, version, stage, files, digest=None, inputs=None):
    with store.write_stage(version, stage, config={"stage": stage}, inputs=inputs or {}, input_digest=digest) as w:
        for relpath, data in files.items():
            (w.dir / relpath).write_bytes(data)
    return w.ref


def kill_once_uploading(monkeypatch, server: SeaweedServer, min_bytes: int) -> dict:
    """Make the first upload of a file of `min_bytes` or more kill `server` once its bytes start to flow.

    The part that started is held until the server is dead, so the upload cannot complete first.
    Returns {"killed_at": time.monotonic() of the kill} once it happened.
    """
    real_upload = ObjectStore.upload_file
    started, killed, when = threading.Event(), threading.Event(), {}

    def upload_file(self, path, key, progress=None):
        if Path(path).stat().st_size < min_bytes or started.is_set():
            return real_upload(self, path, key, progress)

        def held(transferred: int) -> None:
            started.set()
            killed.wait(60)
            if progress is not None:
                progress(transferred)

        return real_upload(self, path, key, held)

    def killer() -> None:
        if started.wait(300):
            server.kill()
            when["killed_at"] = time.monotonic()
        killed.set()

    monkeypatch.setattr(ObjectStore, "upload_file", upload_file)
    threading.Thread(target=killer, daemon=True, name="kill the server mid-upload").start()
    when["release"] = killed.set  # lets a failing test free the held part
    return when


def wait_until_serving(server: SeaweedServer, bucket: str, key: str, seconds: float = 60) -> None:
    """Wait until `key` reads: after a restart, S3 answers (start() returns) a few seconds before the
    volume server serves reads again (HTTP 500 InternalError meanwhile)."""
    client, deadline = server.client(), time.monotonic() + seconds
    while True:
        try:
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
            return
        except (BotoCoreError, ClientError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_server_killed_mid_upload_fails_the_stage_and_a_rerun_reuses_what_was_committed(server, monkeypatch,
                                                                                           tmp_path):
    use_server(monkeypatch, server)
    server.create_bucket("killed-mid-upload")
    url = "s3://killed-mid-upload/store"
    worker = S3Store(url, cache_dir=tmp_path / "worker")
    first = worker.create_version("m")
    data = commit(worker, first, "data", {"split.npz": b"split" * 1000}, digest="d-data")
    weights = os.urandom(40 * MIB)  # five 8 MiB parts: multipart
    kill = kill_once_uploading(monkeypatch, server, 8 * MIB)
    try:
        with pytest.raises(S3Unreachable) as caught:
            # notes.txt (sorted first) reaches the bucket; weights.bin is cut off mid-way.
            commit(worker, first, "train", {"notes.txt": b"trained", "weights.bin": weights}, "d-train",
                   {"data": data})
        failed_after_s = time.monotonic() - kill["killed_at"]
    finally:
        kill["release"]()
        if server.process is None:
            server.start()  # the same data and ports: the server came back
        wait_until_serving(server, "killed-mid-upload", f"store/{version_key('m', first.version)}/data/manifest.json")
    print(f"write_stage failed {failed_after_s:.1f} s after the kill: {caught.value}")
    assert caught.value.exit_code == 3 and failed_after_s < 60
    assert server.endpoint in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)
    train_key = f"{version_key('m', first.version)}/train"
    assert not worker.mirror.local(train_key).exists()  # the mirror holds no stage the bucket does not

    for reader in (worker, S3Store(url, cache_dir=tmp_path / "reader")):  # the writer again, and a new worker
        assert reader.versions("m")[0].stages == ("data",)
        with pytest.raises(ArtifactNotFound, match="no committed stage 'train'"):
            reader.stage_ref(reader.version("m", first.version), "train")
        assert reader.find_reusable("m", "train", "d-train") is None
    checker = S3Store(url, cache_dir=tmp_path / "checker")
    problems = check_store(checker)
    unsealed = [p for p in problems if p.kind == "unsealed-upload"]
    print("fsck after the restart:", [(p.kind, p.path, p.message) for p in problems])
    assert {p.kind for p in problems} == {"unsealed-upload", "incomplete-version"}
    assert len(unsealed) == 1 and unsealed[0].path == checker.objects.full(train_key)
    assert "1 object(s)" in unsealed[0].message  # notes.txt; the weights never completed
    assert repair(checker, problems) == [unsealed[0].path]
    assert [p.kind for p in check_store(checker)] == ["incomplete-version"]

    # The rerun, on the worker whose upload failed: the data stage committed before the kill is reused.
    second = worker.create_version("m")
    found = worker.find_reusable("m", "data", "d-data")
    assert (found.version, found.manifest_sha256) == (first.version, data.manifest_sha256)
    reused = worker.reuse_stage(second, "data", {"stage": "data"}, {}, found, "d-data")
    commit(worker, second, "train", {"notes.txt": b"trained", "weights.bin": weights}, "d-train", {"data": reused})
    worker.finalize_version(second, {"status": "passed"})
    fresh = S3Store(url, cache_dir=tmp_path / "fresh")
    assert fresh.verify_version("m", second.version)["status"] == "passed"
    assert fresh.read_manifest(fresh.finalized_stage_ref(second, "data"))["reused_from"]["version"] == first.version
    folder = fresh.verify_stage(fresh.finalized_stage_ref(second, "train"))
    assert (folder / "weights.bin").read_bytes() == weights


def test_a_wrong_secret_is_refused_with_the_servers_message_and_creates_nothing(secured, monkeypatch, tmp_path):
    secured.create_bucket("faults-wrong-secret")
    use_server(monkeypatch, secured, AWS_SECRET_ACCESS_KEY="not-the-secret")
    with pytest.raises(S3AccessDenied) as caught:
        S3Store("s3://faults-wrong-secret/store", cache_dir=tmp_path / "mirror")
    wrong = boto3.Session(aws_access_key_id=secured.access_key, aws_secret_access_key="not-the-secret",
                          region_name="us-east-1").client("s3", endpoint_url=secured.endpoint)
    with pytest.raises(ClientError) as refused:
        wrong.list_objects_v2(Bucket="faults-wrong-secret", MaxKeys=1)
    server_says = refused.value.response["Error"]["Message"]
    print("refused:", caught.value)
    assert caught.value.exit_code == 2
    assert server_says and server_says in str(caught.value) and "SignatureDoesNotMatch" in str(caught.value)
    assert "AWS_SECRET_ACCESS_KEY" in str(caught.value)
    assert not (tmp_path / "mirror").exists()
    assert secured.client().list_objects_v2(Bucket="faults-wrong-secret")["KeyCount"] == 0


def test_with_the_right_key_two_workers_creating_versions_at_once_get_distinct_numbers(secured, monkeypatch,
                                                                                       tmp_path):
    secured.create_bucket("faults-right-key")
    use_server(monkeypatch, secured)
    stores = [S3Store("s3://faults-right-key/store", cache_dir=tmp_path / name) for name in ("a", "b")]
    barrier, got, failed = threading.Barrier(8), [], []

    def create(store) -> None:
        barrier.wait()
        try:
            got.append(store.create_version("m").version)
        except BaseException as exc:  # re-raised below: a thread's exception must fail the test
            failed.append(exc)

    threads = [threading.Thread(target=create, args=(stores[n % 2],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failed, failed
    assert sorted(got, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(1, 9)]
    assert stores[1].create_version("m").version == "v9"


def test_a_missing_bucket_is_bad_input_naming_it_and_no_bucket_is_created(server, monkeypatch, tmp_path):
    use_server(monkeypatch, server)
    with pytest.raises(S3BucketMissing) as caught:
        S3Store("s3://quantgate-never-made/store", cache_dir=tmp_path / "mirror")
    assert caught.value.exit_code == 2
    assert "'quantgate-never-made'" in str(caught.value) and "creates no bucket" in str(caught.value)
    with pytest.raises(ClientError) as lookup:
        server.client().head_bucket(Bucket="quantgate-never-made")
    assert lookup.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert "quantgate-never-made" not in [b["Name"] for b in server.client().list_buckets()["Buckets"]]
    assert not (tmp_path / "mirror").exists()


def test_an_unreachable_endpoint_fails_in_bounded_time_naming_the_url(monkeypatch, tmp_path):
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    use_server(monkeypatch, SeaweedServer(tmp_path / "never-started"), AWS_ENDPOINT_URL=closed)
    started = time.monotonic()
    with pytest.raises(S3Unreachable) as caught:
        S3Store("s3://some-bucket/store", cache_dir=tmp_path / "mirror")
    took_s = time.monotonic() - started
    print(f"refused after {took_s:.1f} s: {caught.value}")
    assert took_s < 30 and caught.value.exit_code == 3
    assert closed in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)
    assert not (tmp_path / "mirror").exists()


# A worker's process SIGKILLed at `point`: after its stage was committed into its mirror but before any of it
# reached the bucket ("stage-upload"), or after version.json was written into the mirror but before it was
# created in the bucket ("finalize").
_KILLED_AT = """
import os, signal, sys
from quantgate.artifacts.s3 import objects
from quantgate.artifacts.s3.store import S3Store
url, mirror, point = sys.argv[1:4]
store = S3Store(url, cache_dir=mirror)
version = store.create_version("m")
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if point == "stage-upload":
    objects.ObjectStore.upload_file = killed
with store.write_stage(version, "gate", config={}, inputs={}, input_digest="d-gate") as writer:
    (writer.dir / "gate.json").write_text("{}")
real_put_new = objects.ObjectStore.put_new
objects.ObjectStore.put_new = lambda self, key, data: (killed() if key.endswith("/version.json")
                                                       else real_put_new(self, key, data))
store.finalize_version(version, {"status": "passed"})
"""


def killed_worker(server: SeaweedServer, monkeypatch, bucket: str, mirror: Path, point: str) -> S3Store:
    """The store as the worker sees it after its restart, its mirror as a SIGKILL at `point` left it."""
    use_server(monkeypatch, server)
    server.create_bucket(bucket)
    url = f"s3://{bucket}/store"
    process = subprocess.run([sys.executable, "-c", _KILLED_AT, url, str(mirror), point], capture_output=True,
                             timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()[-2000:]
    return S3Store(url, cache_dir=mirror)


def test_a_worker_killed_between_its_local_commit_and_the_upload_sees_no_stage(server, monkeypatch, tmp_path):
    restarted = killed_worker(server, monkeypatch, "killed-before-upload-reads", tmp_path / "worker", "stage-upload")
    assert restarted.versions("m")[0].stages == ()
    assert restarted.find_reusable("m", "gate", "d-gate") is None
    with pytest.raises(ArtifactNotFound):  # as every other worker sees it: the bucket never got the stage
        restarted.stage_ref(restarted.version("m", "v1"), "gate")


def test_a_worker_killed_between_its_local_commit_and_the_upload_can_repair_its_mirror(server, monkeypatch,
                                                                                        tmp_path):
    restarted = killed_worker(server, monkeypatch, "killed-before-upload-fsck", tmp_path / "worker", "stage-upload")
    problems = check_store(restarted)
    print("fsck on the killed worker:", [(p.kind, p.path, p.severity, p.repairable) for p in problems])
    repair(restarted, problems)
    # What the kill left is the worker's own leftover, not damage to the store: fsck --repair clears it,
    # and the worker's fsck agrees with every other worker's (the version is merely interrupted).
    left = check_store(restarted)
    assert all(p.severity == "warning" for p in left), left


def test_a_worker_killed_while_finalizing_cannot_alias_the_version_the_bucket_never_finalized(server, monkeypatch,
                                                                                              tmp_path):
    restarted = killed_worker(server, monkeypatch, "killed-while-finalizing", tmp_path / "worker", "finalize")
    other = S3Store(restarted.url, cache_dir=tmp_path / "other")
    assert [info.status for info in other.versions("m")] == ["incomplete"]  # the bucket holds no version.json
    # An alias only ever names a version every worker can read as finalized.
    with pytest.raises(ArtifactError, match="not finalized"):
        restarted.set_alias("m", "release", "v1")
    assert other.audit_log("m") == [] and other.alias("m", "release") is None
    assert [info.status for info in restarted.versions("m")] == ["incomplete"]
