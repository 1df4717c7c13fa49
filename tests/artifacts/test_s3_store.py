"""The store in a real S3 bucket (SeaweedFS on loopback): the local store's promises from S3's own primitives.

Each `S3Store` below gets its own mirror folder, as a worker on another machine would: nothing
they share but the bucket.
"""

import os
import signal
import subprocess
import sys
import threading

import boto3
import pytest

from quantgate.artifacts import ArtifactCorrupt, ArtifactExists, ArtifactNotFound
from quantgate.artifacts.errors import AliasMoved
from quantgate.artifacts.fsck import check_store, repair
from quantgate.artifacts.s3.objects import parse_url
from quantgate.artifacts.s3.store import S3Store


@pytest.fixture
def worker(s3_url, tmp_path):
    """A factory of stores on one bucket, each with its own mirror: worker("a"), worker("b")."""
    return lambda name: S3Store(s3_url, cache_dir=tmp_path / f"worker-{name}")


def commit(store, version, stage, files, metrics=None, inputs=None, digest=None):
    with store.write_stage(version, stage, config={"stage": stage}, inputs=inputs or {}, input_digest=digest) as w:
        for relpath, data in files.items():
            (w.dir / relpath).parent.mkdir(parents=True, exist_ok=True)
            (w.dir / relpath).write_bytes(data)
        w.metrics.update(metrics or {})
    return w.ref


def finished(store, model="m", status="passed"):
    version = store.create_version(model)
    commit(store, version, "gate", {"gate.json": b"{}"}, {"passed": status == "passed", "criteria": []})
    store.finalize_version(version, {"status": status, "gate": {"passed": status == "passed", "criteria": []}})
    return version


def bucket_client():
    return boto3.client("s3")


def test_what_one_worker_commits_another_reads_verified(worker):
    a, b = worker("a"), worker("b")
    version = a.create_version("m")
    data = commit(a, version, "data", {"split.npz": b"x" * 1000, "sub/labels.txt": b"1\n2\n"}, {"samples": 2})
    a.finalize_version(version, {"status": "passed"})
    a.set_alias("m", "release", version.version, reason="first")

    assert [info.version for info in b.versions("m")] == ["v1"]
    info = b.versions("m")[0]
    assert info.status == "passed" and info.aliases == ("release",) and info.stages == ("data",)
    folder = b.verify_stage(b.finalized_stage_ref(b.version("m", "v1"), "data"))
    assert (folder / "sub" / "labels.txt").read_bytes() == b"1\n2\n"
    assert b.read_manifest(data)["metrics"] == {"samples": 2}
    assert b.alias("m", "release") == "v1"
    assert [(e["from"], e["to"], e["why"]) for e in b.audit_log("m")] == [(None, "v1", "first")]
    assert b.verify_version("m", "v1")["status"] == "passed"
    assert b.models() == ["m"]


def test_eight_workers_creating_versions_at_once_get_distinct_numbers(worker):
    stores = [worker(str(n)) for n in range(8)]
    barrier, got = threading.Barrier(8), []

    def create(store):
        barrier.wait()
        got.append(store.create_version("m").version)

    threads = [threading.Thread(target=create, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got, key=lambda v: int(v[1:])) == [f"v{n}" for n in range(1, 9)]
    assert stores[0].create_version("m").version == "v9"


def test_a_deleted_version_number_is_never_handed_out_again(worker, s3_url):
    a = worker("a")
    finished(a)
    bucket, prefix = parse_url(s3_url)
    client = bucket_client()
    for item in client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/m/versions/")["Contents"]:
        client.delete_object(Bucket=bucket, Key=item["Key"])  # v1 deleted by hand; its claim stays
    assert worker("b").create_version("m").version == "v2"


def test_a_stage_is_invisible_until_its_manifest_is_in_the_bucket(worker, s3_url, tmp_path):
    # SIGKILL between two writes: after the stage's files, before its seal.
    script = f"""
import os, signal
from quantgate.artifacts.s3.store import S3Store
from quantgate.artifacts.s3 import objects
store = S3Store({s3_url!r}, cache_dir={str(tmp_path / 'killed')!r})
version = store.create_version("m")
real = objects.ObjectStore.put_new
def put_new(self, key, data):
    if key.endswith("/data/manifest.json"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, key, data)
objects.ObjectStore.put_new = put_new
with store.write_stage(version, "data", config={{}}, inputs={{}}) as writer:
    (writer.dir / "big.bin").write_bytes(os.urandom(1 << 20))
"""
    process = subprocess.run([sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()[-2000:]
    b = worker("b")
    assert b.versions("m")[0].stages == ()
    with pytest.raises(ArtifactNotFound, match="no committed stage 'data'"):
        b.stage_ref(b.version("m", "v1"), "data")
    assert b.find_reusable("m", "data", "anything") is None
    problems = check_store(b)
    unsealed = [p for p in problems if p.kind == "unsealed-upload"]
    assert len(unsealed) == 1 and unsealed[0].path.endswith("m/versions/v1/data") and unsealed[0].repairable
    assert any(p.kind == "incomplete-version" for p in problems)  # no lease, no record: interrupted
    assert repair(b, problems) == [unsealed[0].path]
    assert [p.kind for p in check_store(b)] == ["incomplete-version"]
    bucket, prefix = parse_url(s3_url)
    assert bucket_client().list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/m/versions/v1/data/")["KeyCount"] == 0


def test_an_object_changed_behind_the_stores_back_is_refused_by_every_read_and_by_fsck(worker, s3_url):
    a = worker("a")
    version = a.create_version("m")
    ref = commit(a, version, "export", {"model.pdmodel": b"real weights" * 100})
    a.finalize_version(version, {"status": "passed"})
    a.verify_stage(ref)  # the writer's mirror holds the good copy
    bucket, prefix = parse_url(s3_url)
    bucket_client().put_object(Bucket=bucket, Key=f"{prefix}/m/versions/v1/export/model.pdmodel",
                               Body=b"forged weights" * 100)
    for reader in (a, worker("b")):  # the writer (whose mirror had the original) and a fresh worker
        with pytest.raises(ArtifactCorrupt, match="model.pdmodel.*does not match its manifest"):
            reader.verify_stage(ref)
        with pytest.raises(ArtifactCorrupt):
            reader.verify_version("m", "v1")
        passed, why = reader.release_verdict(reader.version("m", "v1"))
        assert not passed and "does not match" in why
    assert [p.kind for p in check_store(worker("c"))] == ["hash-mismatch"]


def test_a_forged_audit_entry_is_refused(worker, s3_url):
    a = worker("a")
    finished(a)
    a.set_alias("m", "release", "v1")
    bucket, prefix = parse_url(s3_url)
    key = f"{prefix}/m/audit/0000000001.json"
    body = bucket_client().get_object(Bucket=bucket, Key=key)["Body"].read().replace(b'"v1"', b'"v9"')
    bucket_client().put_object(Bucket=bucket, Key=key, Body=body)
    with pytest.raises(ArtifactCorrupt, match="audit entry"):
        worker("b").alias("m", "release")
    assert "malformed-audit-log" in [p.kind for p in check_store(worker("c"))]


def test_four_workers_moving_release_at_once_lose_and_reorder_no_move(worker):
    stores = [worker(str(n)) for n in range(4)]
    versions = [finished(stores[n % 4]).version for n in range(8)]
    barrier, done, lost = threading.Barrier(4), [], []

    def mover(index):
        store = stores[index]
        barrier.wait()
        for version in versions[index::4]:
            while True:
                try:
                    with store.alias_moves("m") as moves:
                        before = moves.current("release")
                        moves.move("release", version, reason=f"mover {index}", expected_previous=before)
                    done.append(version)
                    break
                except AliasMoved:
                    lost.append(version)  # another mover's commit came first: read again and retry

    threads = [threading.Thread(target=mover, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log = worker("reader").audit_log("m")
    assert len(log) == len(done) == 8 and sorted(done) == sorted(versions)
    assert [entry["seq"] for entry in log] == list(range(1, 9))
    # One unbroken chain: each move's "from" is exactly where the move before it left the alias.
    assert [entry["from"] for entry in log] == [None] + [entry["to"] for entry in log[:-1]]
    assert worker("reader2").alias("m", "release") == log[-1]["to"]


def test_a_stage_committed_by_one_worker_is_reused_by_another(worker, monkeypatch):
    a, b = worker("a"), worker("b")
    first = a.create_version("m")
    source = commit(a, first, "train", {"w.npz": b"weights"}, {"loss": 0.1}, digest="d1")
    second = b.create_version("m")
    found = b.find_reusable("m", "train", "d1")
    assert (found.version, found.stage, found.manifest_sha256) == (source.version, "train", source.manifest_sha256)
    assert b.find_reusable("m", "train", "other") is None
    uploaded = []
    monkeypatch.setattr(b.objects, "upload_file", lambda path, key, progress=None: uploaded.append(key))
    reused = b.reuse_stage(second, "train", {"stage": "train"}, {}, found, "d1")
    assert uploaded == []  # copied inside the bucket from the verified source object: no bytes travel
    manifest = worker("c").read_manifest(reused)
    assert manifest["reused_from"]["version"] == "v1" and manifest["metrics"] == {"loss": 0.1}
    assert b.objects.head("m/versions/v2/train/w.npz").etag == a.objects.head("m/versions/v1/train/w.npz").etag


def test_checkpoints_decisions_and_the_cache_travel_between_workers(worker):
    a, b = worker("a"), worker("b")
    version = a.create_version("m")
    with a.write_checkpoint(version, "train", "epoch-0001") as writer:
        (writer.dir / "state.npz").write_bytes(b"epoch one")
    latest = b.latest_checkpoint(b.version("m", "v1"), "train")
    assert latest.name == "epoch-0001" and b.read_checkpoint(latest)["state.npz"] == b"epoch one"

    finished_version = finished(a)
    assert a.record_decision(finished_version, {"gate": {"passed": False}}).endswith("decisions/0001.json")
    assert b.record_decision(b.version("m", finished_version.version), {"gate": {"passed": True}}).endswith("0002.json")
    assert [d["decision"] for d in worker("c").decisions(finished_version)] == [1, 2]

    with a.cache("quantize-search").fill("digest-1") as folder:
        (folder / "scales.json").write_text("{}")
    entry = b.cache("quantize-search").get("digest-1")
    assert entry is not None and (entry / "scales.json").read_text() == "{}"
    assert b.cache("quantize-search").get("digest-2") is None


def test_a_running_version_holds_a_lease_that_another_worker_sees(worker):
    a, b = worker("a"), worker("b")
    version = a.create_version("m")
    with a.hold_version(version):
        assert b.version_is_running("m", version.version)
        assert not [p for p in check_store(b) if p.kind == "incomplete-version"]
    assert not b.version_is_running("m", version.version)
    assert [p.kind for p in check_store(b)] == ["incomplete-version"]


def test_an_expired_lease_is_reported_and_removed_by_repair(worker, monkeypatch):
    from quantgate.artifacts.s3 import lease

    a = worker("a")
    version = a.create_version("m")
    lease.Lease(a.objects, f"m/versions/{version.version}/lease.json").start()  # a run that then died
    monkeypatch.setattr(lease, "LEASE_S", -1.0)
    b = worker("b")
    problems = check_store(b)
    assert {p.kind for p in problems} == {"expired-lease", "incomplete-version"}
    repair(b, problems)
    assert b.objects.head(f"m/versions/{version.version}/lease.json") is None


def test_a_finalized_version_stays_finalized_and_a_second_record_is_refused(worker):
    a, b = worker("a"), worker("b")
    version = finished(a)
    with pytest.raises(ArtifactExists):
        b.finalize_version(b.version("m", version.version), {"status": "failed"})
    assert worker("c").version_record(version)["status"] == "passed"


def test_a_multipart_upload_that_never_completed_is_reported_and_aborted_by_repair(worker, s3_url, monkeypatch):
    from quantgate.artifacts.s3 import checks

    a = worker("a")
    version = a.create_version("m")
    bucket, prefix = parse_url(s3_url)
    client = bucket_client()
    key = f"{prefix}/m/versions/{version.version}/train/weights.npz"
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * (5 << 20))
    assert [p.kind for p in check_store(worker("b"))] == ["incomplete-version"]  # younger than a lease: live
    monkeypatch.setattr(checks, "lease_expired", lambda when, now=None: True)  # ...and now long abandoned
    problems = check_store(worker("b"))
    abandoned = [p for p in problems if p.kind == "abandoned-multipart"]
    assert len(abandoned) == 1 and abandoned[0].repairable and "weights.npz" in abandoned[0].path
    repair(worker("b"), problems)
    assert client.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/").get("Uploads", []) == []
