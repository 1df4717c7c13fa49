"""The `quantgate` command on a store in a real S3 bucket (SeaweedFS on loopback): real processes, real exit codes.

One pipeline run fills the module's bucket; every other command reads it as a user on another machine
would (a mirror of its own, $QUANTGATE_S3_CACHE), so what they see came from the bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from cli_runs import MODEL, TINY_RUN, Runner
from support.s3_fixtures import bucket_name
from support.seaweed import free_ports

from quantgate.artifacts.s3.store import CACHE_ENV, S3Store

# Read by boto3 from a developer's environment; they would override the server's settings.
_CLEARED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION")


@dataclass(frozen=True)
class S3Cli:
    """The module's bucket after one `quantgate run`, and a way to run commands from any machine."""

    url: str
    bucket: str
    env: dict
    mirrors: Path
    run_output: str

    def machine(self, name: str, **env: str) -> Runner:
        """A Runner on machine `name`: its own S3 mirror, the server's settings, `env` on top."""
        return Runner({**self.env, CACHE_ENV: str(self.mirrors / name), **env})

    def store(self, name: str) -> S3Store:
        return S3Store(self.url, cache_dir=self.mirrors / name)

    def release_moves(self) -> list[dict]:
        return [entry for entry in self.store("auditor").audit_log(MODEL) if entry["alias"] == "release"]


@pytest.fixture(scope="module")
def s3_cli(quantgate_cli, s3_server, tmp_path_factory) -> S3Cli:
    bucket = bucket_name("s3-cli")
    s3_server.create_bucket(bucket)
    env = {name: value for name, value in {**quantgate_cli.env, **s3_server.env()}.items() if name not in _CLEARED}
    cli = S3Cli(f"s3://{bucket}/store", bucket, env, tmp_path_factory.mktemp("s3-mirrors"), "")
    result = cli.machine("runner").run("run", "--store", cli.url, *TINY_RUN)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return S3Cli(cli.url, bucket, env, cli.mirrors, result.stdout)


def unbroken(moves: list[dict]) -> bool:
    """Whether each move starts exactly where the move before it left the alias."""
    return [move["from"] for move in moves] == [None] + [move["to"] for move in moves[:-1]]


def test_a_missing_bucket_exits_2_naming_it_and_creates_no_bucket(quantgate_cli, s3_server, tmp_path):
    env = {**quantgate_cli.env, **s3_server.env(), CACHE_ENV: str(tmp_path / "mirror")}
    for command in (["run", *TINY_RUN], ["versions"]):
        result = Runner(env).run(*command, "--store", "s3://quantgate-cli-never-made/store", timeout=120)
        assert result.returncode == 2, result.stderr[-2000:]
        assert "'quantgate-cli-never-made'" in result.stderr and "creates no bucket" in result.stderr
    with pytest.raises(ClientError) as lookup:
        s3_server.client().head_bucket(Bucket="quantgate-cli-never-made")
    assert lookup.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert not (tmp_path / "mirror").exists()


def test_an_unreachable_endpoint_exits_3_naming_it(quantgate_cli, s3_server, tmp_path):
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    env = {**quantgate_cli.env, **s3_server.env(), "AWS_ENDPOINT_URL": closed, CACHE_ENV: str(tmp_path / "mirror")}
    result = Runner(env).run("versions", "--store", "s3://some-bucket/store", timeout=120)
    assert result.returncode == 3, result.stderr[-2000:]
    assert closed in result.stderr and "AWS_ENDPOINT_URL" in result.stderr


def test_a_run_on_s3_is_listed_logged_and_checked_from_another_machine(s3_cli):
    assert f"quantgate {MODEL}/v1: gate PASSED" in s3_cli.run_output
    assert f"stored in {s3_cli.url}/{MODEL}/versions/v1" in s3_cli.run_output
    reader = s3_cli.machine("reader")
    listing = reader.run("versions", "--store", s3_cli.url, "--json")
    assert listing.returncode == 0, listing.stderr
    v1 = {entry["version"]: entry for entry in json.loads(listing.stdout)}["v1"]
    assert v1["status"] == "passed" and "latest" in v1["aliases"]  # `release` may have moved in a later test

    log = reader.run("log", "--store", s3_cli.url)
    assert log.returncode == 0, log.stderr
    assert "latest: none -> v1" in log.stdout and "release: none -> v1" in log.stdout

    fsck = reader.run("fsck", "--store", s3_cli.url)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert f"fsck {s3_cli.url}: 0 error(s)" in fsck.stdout


def test_gate_decides_a_stored_version_again_and_records_it_in_the_bucket(s3_cli):
    result = s3_cli.machine("gatekeeper").run("gate", "v1", "--store", s3_cli.url, "--set", "gate.min_speedup=0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{MODEL}/v1: gate PASSED (decided again)" in result.stdout
    assert f"{s3_cli.url}/{MODEL}/versions/v1/decisions/" in result.stdout
    decisions = s3_cli.store("decision-reader").decisions(s3_cli.store("decision-reader").version(MODEL, "v1"))
    assert decisions and decisions[-1]["gate"]["passed"] is True


def test_bundle_writes_a_verified_deployment_folder_from_the_bucket(s3_cli, tmp_path):
    out = tmp_path / "bundle"
    result = s3_cli.machine("deployer").run("bundle", "v1", "--out", str(out), "--store", s3_cli.url)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((out / "bundle.json").read_text())
    assert manifest["files"] and all((out / name).is_file() for name in manifest["files"])


def copy_version(store: S3Store, source: str) -> str:
    """A new version of MODEL holding `source`'s stages (reused, re-hashed) and record: a second passing run
    without a second pipeline run."""
    old = store.version(MODEL, source)
    record = store.version_record(old)
    new = store.create_version(MODEL)
    pending, refs = dict(record["stages"]), {}
    while pending:
        for stage in list(pending):
            ref = store.finalized_stage_ref(old, stage)
            manifest = store.read_manifest(ref)
            pins = manifest.get("inputs", {})
            if all(pin["stage"] in refs for pin in pins.values()):
                inputs = {name: refs[pin["stage"]] for name, pin in pins.items()}
                refs[stage] = store.reuse_stage(new, stage, manifest["config"], inputs, ref, manifest["input_digest"])
                del pending[stage]
    kept = {key: value for key, value in record.items() if key not in ("model", "version", "finalized_at", "stages")}
    store.finalize_version(new, kept)
    return new.version


def test_promote_and_rollback_move_release_and_a_race_between_them_keeps_one_chain(s3_cli):
    v2 = copy_version(s3_cli.store("maker"), "v1")
    runner = s3_cli.machine("operator")
    promoted = runner.run("promote", v2, "--store", s3_cli.url)
    assert promoted.returncode == 0, promoted.stderr
    assert f"release: {MODEL}/v1 -> {v2}" in promoted.stdout
    rolled = runner.run("rollback", "--store", s3_cli.url)
    assert rolled.returncode == 0, rolled.stderr
    assert f"release: {MODEL}/{v2} -> v1 (rollback" in rolled.stdout
    assert runner.run("promote", v2, "--store", s3_cli.url).returncode == 0
    before = len(s3_cli.release_moves())

    # At once, from two machines: a rollback (to v1) and a promotion of v1. Whichever commits first wins; the
    # other either sees the new state and acts on it, or was decided on the old one and moves nothing.
    racers = {name: s3_cli.machine(name).start(*command, "--store", s3_cli.url)
              for name, command in (("rollback", ["rollback"]), ("promote", ["promote", "v1"]))}
    outputs = {name: process.communicate(timeout=180)[0] for name, process in racers.items()}
    codes = {name: process.returncode for name, process in racers.items()}
    print("race:", codes, outputs)
    assert 0 in codes.values()
    for name, code in codes.items():
        assert code == 0 or "nothing moved" in outputs[name], outputs[name]
    moves = s3_cli.release_moves()
    moved = sum(" -> " in outputs[name] for name, code in codes.items() if code == 0)
    assert len(moves) == before + moved and 1 <= moved <= 2
    assert unbroken(moves)
    assert s3_cli.store("auditor-2").alias(MODEL, "release") == moves[-1]["to"]


def test_fsck_exits_1_naming_a_stage_object_forged_in_the_bucket(s3_cli, s3_server):
    client = s3_server.client()
    forged = bucket_name("s3-cli-forged")
    client.create_bucket(Bucket=forged)  # a copy of the module's bucket: the other tests keep an intact store
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3_cli.bucket):
        for item in page.get("Contents", []):
            client.copy_object(Bucket=forged, Key=item["Key"], CopySource={"Bucket": s3_cli.bucket, "Key": item["Key"]})
    key = f"store/{MODEL}/versions/v1/export/model.pdiparams"
    client.put_object(Bucket=forged, Key=key, Body=b"forged weights" * 1000)
    result = s3_cli.machine("inspector").run("fsck", "--store", f"s3://{forged}/store")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "hash-mismatch" in result.stdout and f"{MODEL}/versions/v1/export/model.pdiparams" in result.stdout
    assert f"fsck s3://{forged}/store: 1 error(s)" in result.stdout

