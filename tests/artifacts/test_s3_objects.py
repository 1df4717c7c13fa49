"""The bucket layer of the S3 store (artifacts/s3/objects.py) against a real SeaweedFS server: objects
round-trip, conditional writes let exactly one of racing writers win, large files go multipart, and a
missing bucket, refused credentials, a dead endpoint or a bad URL each fail with a message that says what to fix.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.seaweed import SeaweedServer, free_ports  # noqa: E402

from quantgate.artifacts.errors import ArtifactNotFound  # noqa: E402
from quantgate.artifacts.s3.objects import (  # noqa: E402
    Listed,
    ObjectStore,
    S3AccessDenied,
    S3BadUrl,
    S3BucketMissing,
    S3Unreachable,
    parse_url,
)

WRITERS = 8


def race(attempt) -> list[bool]:
    """attempt(i) for i in range(WRITERS), all released together at a barrier; their results in order."""
    barrier = threading.Barrier(WRITERS)
    results: list = [None] * WRITERS

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = attempt(index)
        except BaseException as exc:  # re-raised below: a thread's exception must fail the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def use_server(monkeypatch, env: dict[str, str], **overrides: str) -> None:
    for name, value in {**env, **overrides}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A second server that accepts only its own key pair (an -s3.config identities file)."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed-identities"), identities=True).start()
    yield server
    server.kill()  # its data is thrown away: no need for weed's slow graceful stop


def test_objects_round_trip_and_list_relative_to_the_store_prefix(s3_url):
    objects = ObjectStore(s3_url)
    bucket = s3_url.removeprefix("s3://").split("/")[0]
    assert (objects.bucket, objects.prefix, objects.endpoint) == (bucket, "store", objects.client.meta.endpoint_url)
    etag = objects.put("models/a/v1/seal.json", b"{}")
    weights_etag = objects.put("models/a/v2/weights.bin", b"w" * 10)
    objects.put("models/b/aliases/prod.json", b"p")
    objects.put("top.txt", b"t")

    assert objects.get("models/a/v1/seal.json") == b"{}"
    assert objects.get_with_etag("models/a/v1/seal.json") == (b"{}", etag)
    assert objects.head("models/a/v2/weights.bin") == Listed("models/a/v2/weights.bin", 10, weights_etag)
    assert '"' not in weights_etag and weights_etag != etag
    assert objects.get("models/a/v9/missing") is None and objects.get_with_etag("nothing") is None
    assert objects.head("models/a") is None

    assert [item.key for item in objects.list()] == [
        "models/a/v1/seal.json", "models/a/v2/weights.bin", "models/b/aliases/prod.json", "top.txt"]
    assert [item.key for item in objects.list("models/a/")] == ["models/a/v1/seal.json", "models/a/v2/weights.bin"]
    assert objects.list_dirs("models") == objects.list_dirs("models/") == ["a", "b"]
    assert objects.list_dirs("") == ["models"] and objects.list_dirs("models/a/v1") == []
    assert objects.full("top.txt") == f"s3://{bucket}/store/top.txt"

    objects.delete("top.txt")
    objects.delete("top.txt")  # absent: nothing happens
    objects.delete_many(["models/a/v1/seal.json", "models/b/aliases/prod.json", "never-there"])
    assert [item.key for item in objects.list()] == ["models/a/v2/weights.bin"]


def test_listing_and_delete_many_cross_the_1000_key_page(s3_url):
    objects = ObjectStore(s3_url)
    keys = [f"many/{index:04d}" for index in range(1005)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: objects.put(key, b"x"), keys))
    objects.put("kept", b"k")
    assert [item.key for item in objects.list("many/")] == keys
    objects.delete_many(keys)
    assert [item.key for item in objects.list()] == ["kept"]


def test_put_new_creates_only_if_absent_and_exactly_one_racing_writer_wins(s3_url):
    objects = ObjectStore(s3_url)
    assert objects.put_new("once", b"first") is True
    assert objects.put_new("once", b"second") is False
    assert objects.get("once") == b"first"

    won = race(lambda index: objects.put_new("seal.json", f"writer {index}".encode()))
    assert won.count(True) == 1
    assert objects.get("seal.json") == f"writer {won.index(True)}".encode()


def test_put_if_match_replaces_only_the_expected_version_and_one_racing_mover_wins(s3_url):
    objects = ObjectStore(s3_url)
    etag = objects.put("alias.json", b"v1")
    assert objects.put_if_match("alias.json", b"v2", "0" * 32) is False
    assert objects.put_if_match("alias.json", b"v2", etag) is True
    assert objects.put_if_match("alias.json", b"v3", etag) is False  # stale: someone moved it
    assert objects.put_if_match("gone.json", b"v1", etag) is False
    assert objects.get("alias.json") == b"v2" and objects.get("gone.json") is None

    _, current = objects.get_with_etag("alias.json")
    won = race(lambda index: objects.put_if_match("alias.json", f"mover {index}".encode(), current))
    assert won.count(True) == 1
    assert objects.get("alias.json") == f"mover {won.index(True)}".encode()


def test_a_large_file_uploads_multipart_and_downloads_whole_with_progress(s3_url, tmp_path):
    objects = ObjectStore(s3_url)
    source = tmp_path / "weights.bin"
    data = bytes(range(256)) * (20 * 1024 * 4)  # 20 MiB
    source.write_bytes(data)
    sent, received = [], []
    objects.upload_file(source, "models/m/weights.bin", progress=sent.append)
    assert sum(sent) == len(data) and len(sent) > 1

    listed = objects.head("models/m/weights.bin")
    assert listed.size == len(data)
    assert listed.etag.endswith("-3")  # three 8 MiB parts: a multipart upload

    target = tmp_path / "down" / "deep" / "weights.bin"
    objects.download_file("models/m/weights.bin", target, progress=received.append)
    assert target.read_bytes() == data and sum(received) == len(data)
    assert sorted(path.name for path in target.parent.iterdir()) == ["weights.bin"]  # no temporary file left


def test_downloading_a_missing_object_names_it_and_leaves_nothing(s3_url, tmp_path):
    objects = ObjectStore(s3_url)
    with pytest.raises(ArtifactNotFound, match=r"s3://.*/store/models/m/absent\.bin"):
        objects.download_file("models/m/absent.bin", tmp_path / "absent.bin")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_bucket_is_bad_input_that_says_quantgate_creates_none(s3_server):
    with pytest.raises(S3BucketMissing) as caught:
        ObjectStore("s3://quantgate-no-such-bucket/store")
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "'quantgate-no-such-bucket'" in message and "aws s3 mb s3://quantgate-no-such-bucket" in message
    assert "--store" in message and s3_server.endpoint in message


def test_a_wrong_secret_is_refused_with_the_servers_reason(secured, monkeypatch):
    secured.create_bucket("secured-wrong-secret")
    use_server(monkeypatch, secured.env(), AWS_SECRET_ACCESS_KEY="not-the-secret")
    with pytest.raises(S3AccessDenied) as caught:
        ObjectStore("s3://secured-wrong-secret/store")
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "SignatureDoesNotMatch" in message and "signature we calculated does not match" in message
    assert "AWS_ACCESS_KEY_ID" in message and "AWS_SECRET_ACCESS_KEY" in message and "AWS_PROFILE" in message

    use_server(monkeypatch, secured.env(), AWS_ACCESS_KEY_ID="nobody")
    with pytest.raises(S3AccessDenied, match="InvalidAccessKeyId"):
        ObjectStore("s3://secured-wrong-secret/store", check=False).get("anything")


def test_the_right_key_works_and_put_new_still_holds_under_a_race(secured, monkeypatch):
    secured.create_bucket("secured-right-key")
    use_server(monkeypatch, secured.env())
    objects = ObjectStore("s3://secured-right-key/store")
    assert objects.put_new("a", b"1") is True and objects.get("a") == b"1"
    won = race(lambda index: objects.put_new("seal.json", f"writer {index}".encode()))
    assert won.count(True) == 1


def test_an_unreachable_endpoint_fails_in_bounded_time_naming_the_url(monkeypatch, tmp_path):
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    use_server(monkeypatch, SeaweedServer(tmp_path).env(), AWS_ENDPOINT_URL=closed)  # settings only: never started
    started = time.monotonic()
    with pytest.raises(S3Unreachable) as caught:
        ObjectStore("s3://some-bucket/store")
    assert time.monotonic() - started < 30
    assert caught.value.exit_code == 3
    assert closed in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)


@pytest.mark.parametrize("url", [
    "bucket/prefix", "http://bucket/prefix", "s3://", "s3:///prefix", "s3://ab/prefix", "s3://Bucket/prefix",
    "s3://under_score/prefix", f"s3://{'b' * 64}/prefix", "s3://-bucket/prefix", "s3://bucket/a//b",
    "s3://bucket/a/../b", "s3://bucket/./b",
])
def test_a_bad_store_url_is_refused_with_the_form_to_use(url):
    with pytest.raises(S3BadUrl, match=r"s3://BUCKET/PREFIX") as caught:
        parse_url(url)
    assert caught.value.exit_code == 2 and repr(url) in str(caught.value)


def test_a_good_store_url_splits_into_bucket_and_prefix():
    assert parse_url("s3://bucket/some/prefix") == ("bucket", "some/prefix")
    assert parse_url("s3://my.bucket-1/some/prefix/") == ("my.bucket-1", "some/prefix")
    assert parse_url("s3://abc") == parse_url("s3://abc/") == ("abc", "")
    assert parse_url(f"s3://{'b' * 63}/p") == ("b" * 63, "p")
