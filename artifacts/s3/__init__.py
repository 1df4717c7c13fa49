"""The artifact store in an S3-compatible bucket (`--store s3://BUCKET/PREFIX`), shared by many workers.

    objects.py   the bucket through boto3: conditional writes, multipart, errors that name the fix
    listing.py   the keys of a model read as the store's layout (claims, stages, leases, audit entries)
    mirror.py    the worker's local mirror of the bucket, fetched whole and verified, uploaded seal last
    book.py      the ETags this worker verified, so a changed object is fetched again and judged
    store.py     S3Store: the ArtifactStore API on the bucket
    moves.py     alias moves: audit entry k+1 created once is the one commit point
    lease.py     a running version's heartbeat, instead of flock
    cache.py     the search cache, shared and content-addressed
    checks.py    what fsck can only learn from the bucket
    uploads.py   small pieces: the uploading writer, version claims, aliases from the log

docs/s3-store.md says what each promise rests on.
"""
