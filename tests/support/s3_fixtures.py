"""Pytest fixtures for tests against a real S3 server (SeaweedFS), loaded as a plugin by tests/conftest.py.

    def test_commit_lands_in_the_bucket(s3_url):      # "s3://<fresh bucket>/store"
        objects = ObjectStore(s3_url)                  # boto3 finds the server through os.environ

    def test_a_crash(s3_server, s3_url):               # the SeaweedServer itself: kill(), restart(), env()

One server for the whole session (started on first use); each test gets a bucket of its own, so
tests never see each other's objects.
"""

from __future__ import annotations

import itertools
import os
import re

import pytest

from .seaweed import SeaweedServer

# Read by boto3 from a developer's environment; they would override or confuse the server's settings.
_CLEARED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION")
_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A SeaweedFS server for the session, with os.environ pointing boto3 at it (restored afterwards)."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweed"))
    settings = server.env()
    saved = {name: os.environ.get(name) for name in (*settings, *_CLEARED)}
    server.start()
    try:
        for name in _CLEARED:
            os.environ.pop(name, None)
        os.environ.update(settings)
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.kill()  # its data is thrown away: no need for weed's slow graceful stop


def bucket_name(test_name: str) -> str:
    """A bucket name of its own for `test_name`: lowercase, 3-63 characters, unique in this session."""
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower().removeprefix("test_")).strip("-")[:48].strip("-")
    return f"{stem or 'test'}-{next(_buckets)}-{os.getpid() % 10000}"


@pytest.fixture
def s3_url(s3_server, request) -> str:
    """"s3://BUCKET/store" in a bucket created for this test alone."""
    bucket = bucket_name(request.node.name)
    s3_server.create_bucket(bucket)
    return f"s3://{bucket}/store"
