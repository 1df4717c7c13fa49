"""The bucket as the store sees it: bytes under '/'-separated keys below one prefix, written
unconditionally, created only if absent (`If-None-Match: *`) or replaced only if unchanged (`If-Match`).

    objects = ObjectStore("s3://my-bucket/quantgate")   # HeadBucket: a missing bucket fails here
    objects.put_new("models/m/aliases/prod.json", data)  # False if another writer created it first

The endpoint, credentials and region come from boto3's standard settings chain (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/config), so the same code talks to AWS,
SeaweedFS or MinIO. Every client call goes through `ObjectStore._call`, which turns boto3's exceptions
into the artifact store's error family: a message that names the object, the server's reason and the fix.
"""

from __future__ import annotations

import functools
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import boto3
import s3transfer.exceptions
from boto3.exceptions import RetriesExceededError, S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, NoCredentialsError, ProfileNotFound
from botocore.exceptions import ConnectionError as BotoConnectionError

from quantgate.errors import BadInput, clipped

from ..errors import ArtifactError, ArtifactNotFound

_ATTEMPTS = 4
# Bounded: a dead endpoint fails within ~20 s (4 tries of at most 3 s, with backoff), never hangs.
_CLIENT_CONFIG = Config(retries={"max_attempts": _ATTEMPTS, "mode": "standard"}, connect_timeout=3, read_timeout=60)
_MIB = 1024 * 1024
_TRANSFER = TransferConfig(multipart_threshold=8 * _MIB, multipart_chunksize=8 * _MIB)
_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys a request

# Error codes that mean "not there" or "someone else wrote first"; HEAD responses carry no body, so
# their code is the bare HTTP status.
_MISSING = frozenset({"NoSuchKey", "404"})
_CONFLICT = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_DENIED = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "ExpiredToken",
                     "InvalidToken", "AllAccessDisabled"})
_CREDENTIALS_FIX = ("check the credentials boto3 found: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or the profile "
                    "AWS_PROFILE names in ~/.aws/credentials, and that they may read, write and list the bucket")

_URL = re.compile(r"s3://(?P<bucket>[^/]*)(?:/(?P<prefix>.*))?", re.DOTALL)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_URL_FIX = "write the store as s3://BUCKET/PREFIX"

T = TypeVar("T")

# The settings a client is made from: a process opens the store once per task, and making a boto3 client
# (loading its service model) costs ~0.1 s, so one client serves every store opened with the same settings.
_SETTINGS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
             "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
# (settings, bucket) pairs whose bucket this process has already found (HeadBucket) with those settings.
_CHECKED: set[tuple[tuple, str]] = set()


@functools.lru_cache(maxsize=8)
def _client(settings: tuple):
    """One thread-safe boto3 S3 client per distinct `settings` (the values of _SETTINGS) in this process."""
    return boto3.Session().client("s3", config=_CLIENT_CONFIG)


class S3BadUrl(ArtifactError, BadInput):
    """The store URL is not s3://BUCKET/PREFIX with a valid bucket name (exit code 2)."""


class S3BucketMissing(ArtifactError, BadInput):
    """The store's bucket does not exist; quantgate never creates one (exit code 2)."""


class S3AccessDenied(ArtifactError, BadInput):
    """The server refused the credentials or the operation (exit code 2)."""


class S3Unreachable(ArtifactError):
    """The endpoint did not answer after botocore's bounded retries (exit code 3)."""


@dataclass(frozen=True)
class Listed:
    """One object: its key relative to the store's prefix, its size in bytes and its ETag (no quotes)."""

    key: str
    size: int
    etag: str
    # When the server last wrote it (its own clock): what a lease's age is measured by.
    modified: datetime | None = field(default=None, compare=False)


def parse_url(url: str) -> tuple[str, str]:
    """("bucket", "some/prefix") of "s3://bucket/some/prefix" (the prefix may be empty).

    Raises:
        S3BadUrl: not an s3:// URL, a bucket name S3 refuses, or an empty, '.' or '..' prefix segment.
    """
    shown = clipped(repr(url), 200)
    match = _URL.fullmatch(url)
    if match is None:
        raise S3BadUrl(f"{shown} is not an S3 store URL; {_URL_FIX}")
    bucket, prefix = match["bucket"], (match["prefix"] or "").rstrip("/")
    if not _BUCKET.fullmatch(bucket):
        raise S3BadUrl(f"{shown} names the bucket {clipped(repr(bucket), 80)}, which S3 refuses: a bucket name is "
                       f"3-63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit; "
                       f"{_URL_FIX}")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise S3BadUrl(f"{shown} has an empty, '.' or '..' folder in its prefix {clipped(repr(prefix), 80)}; "
                       f"{_URL_FIX} with '/'-separated names")
    return bucket, prefix


def _etag(response: dict) -> str:
    return response["ETag"].strip('"')


class ObjectStore:
    """The objects under `url` (s3://BUCKET/PREFIX); keys are relative to PREFIX and '/'-separated.

    One boto3 client, safe to share between threads. With `check`, the bucket is looked up at once
    (HeadBucket), so a wrong bucket, endpoint or credential fails before any work starts.

    Raises:
        S3BadUrl, S3BucketMissing, S3AccessDenied, S3Unreachable: see the classes.
    """

    def __init__(self, url: str, *, check: bool = True):
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        self._root = f"{self.prefix}/" if self.prefix else ""
        settings = tuple(os.environ.get(name) for name in _SETTINGS)
        try:
            self.client = _client(settings)
        except ProfileNotFound as exc:
            raise S3AccessDenied(f"cannot open {url}: {exc}; set AWS_PROFILE to a profile of ~/.aws/config, "
                                 "or unset it and set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY") from exc
        self.endpoint: str = self.client.meta.endpoint_url
        if check and (settings, self.bucket) not in _CHECKED:
            self._check_bucket()
            _CHECKED.add((settings, self.bucket))

    def full(self, key: str) -> str:
        """"s3://bucket/prefix/key", for messages."""
        return f"s3://{self.bucket}/{self._root}{key}"

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The bytes of `key`, or None if there is no such object."""
        found = self.get_with_etag(key)
        return None if found is None else found[0]

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        """(bytes, ETag) of `key` from one GET, or None if there is no such object."""
        name = self._absolute(key)

        def read() -> tuple[bytes, str]:
            response = self.client.get_object(Bucket=self.bucket, Key=name)
            return response["Body"].read(), _etag(response)

        return self._call("GetObject", key, read, allow=_MISSING)

    def head(self, key: str) -> Listed | None:
        """Size and ETag of `key`, or None if there is no such object."""
        name = self._absolute(key)
        response = self._call("HeadObject", key, lambda: self.client.head_object(Bucket=self.bucket, Key=name),
                              allow=_MISSING)
        return None if response is None else Listed(key, response["ContentLength"], _etag(response),
                                                     response.get("LastModified"))

    def list(self, prefix: str = "") -> Iterator[Listed]:
        """Every object whose key starts with `prefix` (end it with "/" for a folder), in S3's order."""
        pages = iter(self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._absolute(prefix, prefix=True)))
        while (page := self._call("ListObjectsV2", prefix, lambda: next(pages, {}))):
            for item in page.get("Contents", []):
                yield Listed(item["Key"][len(self._root):], item["Size"], item["ETag"].strip('"'),
                             item.get("LastModified"))

    def list_dirs(self, prefix: str) -> list[str]:
        """Sorted names of the immediate sub-folders of the folder `prefix` ("" for the store's top)."""
        folder = prefix if prefix == "" or prefix.endswith("/") else prefix + "/"
        start = len(self._absolute(folder, prefix=True))
        pages = iter(self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._absolute(folder, prefix=True), Delimiter="/"))
        names = []
        while (page := self._call("ListObjectsV2", folder, lambda: next(pages, {}))):
            names.extend(item["Prefix"][start:].rstrip("/") for item in page.get("CommonPrefixes", []))
        return sorted(names)

    def download_file(self, key: str, path: Path, progress: Callable[[int], None] | None = None) -> None:
        """Write `key` to `path` (its folder created if needed): a temporary file beside it, fsynced,
        then renamed over it, so `path` is never half-written. `progress` gets each chunk's byte count.

        Raises:
            ArtifactNotFound: there is no such object.
        """
        name = self._absolute(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.part"
        try:
            with open(temp, "xb") as handle:
                # download_fileobj returns None; `or True` tells _call's "absent" (None) from success.
                found = self._call("Download", key, lambda: self.client.download_fileobj(
                    self.bucket, name, handle, Config=_TRANSFER, Callback=progress) or True, allow=_MISSING)
                if found is None:
                    raise ArtifactNotFound(f"{self.full(key)} does not exist: nothing to download to {path}")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        """Write `data` to `key` whatever is there; return the new ETag."""
        name = self._absolute(key)
        return _etag(self._call("PutObject", key, lambda: self.client.put_object(
            Bucket=self.bucket, Key=name, Body=data)))

    def put_new(self, key: str, data: bytes) -> bool:
        """Create `key` with `data` only if absent (If-None-Match: *): of racing writers exactly one gets True."""
        name = self._absolute(key)
        response = self._call("PutObject", key, lambda: self.client.put_object(
            Bucket=self.bucket, Key=name, Body=data, IfNoneMatch="*"), allow=_CONFLICT)
        return response is not None

    def put_if_match(self, key: str, data: bytes, etag: str) -> bool:
        """Replace `key` only if its ETag is still `etag` (If-Match); False if it changed or is gone."""
        name = self._absolute(key)
        response = self._call("PutObject", key, lambda: self.client.put_object(
            Bucket=self.bucket, Key=name, Body=data, IfMatch=f'"{etag}"'), allow=_CONFLICT | _MISSING)
        return response is not None

    def upload_file(self, path: Path, key: str, progress: Callable[[int], None] | None = None) -> None:
        """Upload the file at `path` to `key`, multipart from 8 MiB; `progress` gets each chunk's byte count."""
        name = self._absolute(key)
        self._call("Upload", key, lambda: self.client.upload_file(
            str(path), self.bucket, name, Config=_TRANSFER, Callback=progress))

    def copy(self, source: str, key: str, etag: str) -> bool:
        """Copy the object `source` to `key` inside the bucket (no bytes travel), only if `source` still has
        `etag` (x-amz-copy-source-if-match); False if it changed or is gone."""
        args = {"Bucket": self.bucket, "Key": self._absolute(key), "CopySourceIfMatch": f'"{etag}"',
                "CopySource": {"Bucket": self.bucket, "Key": self._absolute(source)}}
        return self._call("CopyObject", key, lambda: self.client.copy_object(**args),
                          allow=_CONFLICT | _MISSING) is not None

    def uploads(self, prefix: str) -> list[tuple[str, str, datetime]]:
        """(key, upload id, initiated) of every multipart upload under `prefix` never completed nor aborted."""
        response = self._call("ListMultipartUploads", prefix, lambda: self.client.list_multipart_uploads(
            Bucket=self.bucket, Prefix=self._absolute(prefix, prefix=True)))
        return [(item["Key"][len(self._root):], item["UploadId"], item["Initiated"])
                for item in (response or {}).get("Uploads", [])]

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Abort a multipart upload: the server frees its parts."""
        name = self._absolute(key)
        self._call("AbortMultipartUpload", key, lambda: self.client.abort_multipart_upload(
            Bucket=self.bucket, Key=name, UploadId=upload_id), allow=_MISSING | frozenset({"NoSuchUpload"}))

    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens if it is absent)."""
        name = self._absolute(key)
        self._call("DeleteObject", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=name))

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove every key in `keys`, 1000 a request; absent keys are fine.

        Raises:
            S3AccessDenied, ArtifactError: the server refused some of them (named in the message).
        """
        names = [self._absolute(key) for key in keys]
        for start in range(0, len(names), _DELETE_BATCH):
            batch = {"Objects": [{"Key": name} for name in names[start:start + _DELETE_BATCH]], "Quiet": True}
            response = self._call("DeleteObjects", names[start][len(self._root):], lambda: self.client.delete_objects(
                Bucket=self.bucket, Delete=batch))
            errors = response.get("Errors", [])
            if errors:
                shown = "; ".join(f"{error.get('Key')}: {error.get('Code')} {error.get('Message')}"
                                  for error in errors[:5])
                kind = S3AccessDenied if any(error.get("Code") in _DENIED for error in errors) else ArtifactError
                fix = _CREDENTIALS_FIX if kind is S3AccessDenied else "run the deletion again"
                raise kind(f"{self.endpoint} did not delete {len(errors)} objects under {self.full('')}: {shown}; "
                           f"{fix}")

    # -- the one place that maps boto3's exceptions ------------------------------------------------

    def _absolute(self, key: str, *, prefix: bool = False) -> str:
        """The bucket key of `key`; keys with empty, '.' or '..' parts are refused, since a filer-backed
        server (SeaweedFS) would normalise them and the object would list under another key."""
        body = key[:-1] if prefix and key.endswith("/") else key
        if (body or not prefix) and any(part in ("", ".", "..") for part in body.split("/")):
            raise ValueError(f"{key!r} is not a store key: '/'-separated names, none empty, '.' or '..'")
        return self._root + key

    def _check_bucket(self) -> None:
        try:
            self._call("HeadBucket", None, lambda: self.client.head_bucket(Bucket=self.bucket))
        except S3AccessDenied as exc:
            if not isinstance(exc.__cause__, ClientError):
                raise  # no credentials at all: nothing to ask the server
            # A HEAD response has no body: ask again with a GET, whose refusal quotes the server's reason.
            self._call("ListObjectsV2", None, lambda: self.client.list_objects_v2(Bucket=self.bucket, MaxKeys=1))
            raise

    def _call(self, operation: str, key: str | None, action: Callable[[], T], allow: frozenset[str] = frozenset()
              ) -> T | None:
        """`action()`'s result, None if it failed with an error code in `allow`; any other failure as
        the store's error naming `operation`, the object (`key`, None for the bucket) and the fix."""
        where = self.full(key) if key is not None else f"s3://{self.bucket}/{self._root}"
        try:
            return action()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in allow:
                return None
            raise self._refused(operation, where, exc) from exc
        except S3UploadFailedError as exc:
            # boto3 turns the part's ClientError into text; the original is still the context.
            if isinstance(exc.__context__, ClientError):
                raise self._refused(operation, where, exc.__context__) from exc
            raise ArtifactError(f"{operation} of {where} failed: {exc}") from exc
        except (BotoConnectionError, HTTPClientError, RetriesExceededError,
                s3transfer.exceptions.RetriesExceededError) as exc:
            reason = getattr(exc, "last_exception", None) or exc
            raise S3Unreachable(
                f"cannot reach the S3 endpoint {self.endpoint} ({operation} of {where}, {_ATTEMPTS} attempts with "
                f"backoff): {reason}; start the server, or point AWS_ENDPOINT_URL (or endpoint_url in "
                f"~/.aws/config) at it") from exc
        except NoCredentialsError as exc:
            raise S3AccessDenied(f"{operation} of {where}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                                 "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE to a profile of ~/.aws/credentials") from exc
        except BotoCoreError as exc:
            raise ArtifactError(f"{operation} of {where} at {self.endpoint} failed: {exc}") from exc

    def _refused(self, operation: str, where: str, exc: ClientError) -> ArtifactError:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), clipped(str(error.get("Message", "")), 500)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket" or (operation == "HeadBucket" and status == 404):
            return S3BucketMissing(
                f"the bucket {self.bucket!r} of the store {self.url} does not exist at {self.endpoint}; quantgate "
                f"creates no bucket: create it (e.g. `aws s3 mb s3://{self.bucket}`) or fix --store")
        if code in _DENIED or status == 403:
            return S3AccessDenied(f"{self.endpoint} refused {operation} of {where}: {code}: {message}; "
                                  f"{_CREDENTIALS_FIX}")
        return ArtifactError(f"{operation} of {where} failed at {self.endpoint}: HTTP {status} {code}: {message}")
