"""The compose stack, built and run for real: Kafka (the project's KRaft image), the
orders producer and the streaming job image, on the host network; once on native JSON,
and once on Debezium Avro through the ``avro`` profile's schema registry (the project's
Apicurio image), the registry's URL reaching the producer and the job from the image's
client properties file.

Checked from the host: the producer delivers the seeded orders stream; the job commits
versions to the table on its named volume, and ``cdc_sink.open_table`` on the volume's
path reads a version equal to the expected state of that stream (the demo's reference
applier), with the malformed records in the dead-letter Parquet beside it; the job's
``/metrics`` answers with that version; the image's health check reports healthy. Every
container (and volume) the test started is removed at the end. Images are built once
per machine and reused (``docker/images.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.engine import COMPOSE_FILE, IMAGES, REPO, docker, free_ports, require_engine

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

EVENTS = 3000
SEED = 11
WAIT_S = 420.0


@dataclass
class Stack:
    """A started compose project."""

    compose: list[str]
    env: dict[str, str]
    project: str
    kafka_port: int
    metrics_port: int
    job_image: str
    format: str

    def run(self, *args: str, timeout: float = 600.0) -> str:
        proc = subprocess.run(
            [*self.compose, *args],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, (
            f"{' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
        return proc.stdout

    def container(self, service: str) -> str:
        cid = self.run("ps", "-a", "-q", service).strip()
        assert cid, f"no container for {service}"
        return cid

    def logs(self, service: str) -> str:
        proc = subprocess.run(
            [*self.compose, "logs", "--no-color", "--tail", "60", service],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return proc.stdout[-6000:]

    def volume_path(self, name: str) -> Path:
        return Path(
            docker("volume", "inspect", "-f", "{{.Mountpoint}}", f"{self.project}_{name}").strip()
        )


@pytest.fixture(scope="module", params=["json", "debezium-avro"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    fmt: str = request.param
    compose = require_engine()
    base = IMAGES.ensure_base_image(REPO).tag
    kafka_image = IMAGES.ensure_kafka_image(REPO, base).tag
    job_image = IMAGES.ensure_job_image(REPO, base).tag
    kafka_port, controller_port, metrics_port, registry_port = free_ports(4)
    project = f"cdcsinktest{uuid.uuid4().hex[:10]}"
    env = dict(
        os.environ,
        KAFKA_IMAGE=kafka_image,
        JOB_IMAGE=job_image,
        KAFKA_PORT=str(kafka_port),
        KAFKA_CONTROLLER_PORT=str(controller_port),
        METRICS_PORT=str(metrics_port),
        ORDERS_EVENTS=str(EVENTS),
        ORDERS_SEED=str(SEED),
        ORDERS_FORMAT=fmt,
        GRAFANA_ADMIN_PASSWORD=secrets.token_urlsafe(24),  # required: no default password
    )
    services = ["kafka", "topics", "producer", "job"]
    profile: list[str] = []
    if fmt == "debezium-avro":
        env.update(
            REGISTRY_IMAGE=IMAGES.ensure_registry_image(REPO, base).tag,
            REGISTRY_PORT=str(registry_port),
            CLIENT_PROPERTIES="/opt/cdc_sink/avro.properties",
        )
        services.append("registry")
        profile = ["--profile", "avro"]
    st = Stack(
        [*compose, "-p", project, "-f", str(COMPOSE_FILE), *profile],
        env,
        project,
        kafka_port,
        metrics_port,
        job_image,
        fmt,
    )
    try:
        try:
            st.run("up", "-d", "--no-build", *services)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n--- kafka ---\n{st.logs('kafka')}\n--- topics ---\n{st.logs('topics')}"
            ) from None
        yield st
    finally:
        subprocess.run(
            [*st.compose, "down", "-v", "--remove-orphans", "-t", "30"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        left = docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}")
        vols = docker(
            "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={project}"
        )
        assert not left.strip(), f"containers left behind: {left}"
        assert not vols.strip(), f"volumes left behind: {vols}"


def _wait_for(what: str, fn: object, timeout: float, logs: str = "") -> object:
    """Polls ``fn`` (an external process's progress) until it returns a true value."""
    assert callable(fn)
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f}s\n{logs}")
        time.sleep(1.0)


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.timeout(3600)  # a first, cold image build on a fresh machine
def test_job_image_commits_the_demo_stream_and_serves_metrics(stack: Stack) -> None:
    import cdc_sink
    from cdc_sink.errors import TableNotFound
    from cdc_sink.kafka.deadletter import ParquetDeadLetter
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, generate_orders, orders_schema

    producer = stack.container("producer")
    code = docker("wait", producer, timeout=WAIT_S).strip()
    assert code == "0", stack.logs("producer")
    assert f"produce_orders: {EVENTS} records (seed {SEED})" in stack.logs("producer")

    full_rows = stack.format == "debezium-avro"  # a connector sends whole rows
    records = generate_orders(EVENTS, seed=SEED, style="full_rows" if full_rows else "partial")
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)
    want = expected.snapshot()
    table_path = stack.volume_path("table") / "orders"

    def caught_up() -> int | None:
        if not (table_path / "_table.json").is_file():
            return None
        try:
            table = cdc_sink.open_table(table_path)
        except TableNotFound:  # the job is creating it: version 0 is not committed yet
            return None
        version = table.version
        rows = table.read(version=version).to_pylist()
        return version if not diff_rows(want, rows, orders_schema()) else None

    version = _wait_for(
        "the table did not reach the expected state", caught_up, WAIT_S, stack.logs("job")
    )
    assert isinstance(version, int) and version >= 1
    table = cdc_sink.open_table(table_path)
    history = table.versions()
    assert history[-1]["version"] == version
    assert history[-1]["app_id"] == "cdc_to_tablets:/checkpoints/orders"  # the job's commit
    assert table.read(version=version).num_rows == len(want) > 0
    dead = ParquetDeadLetter(stack.volume_path("table") / "orders.dead-letter").read()
    assert dead.num_rows == sum(r.malformed for r in records) > 0

    url = f"http://127.0.0.1:{stack.metrics_port}/metrics"

    def metrics_version() -> float | None:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                assert resp.status == 200
                value = _metric(resp.read().decode(), "cdc_sink_table_version")
        except OSError:
            return None
        return value if value == version else None

    _wait_for(
        f"{url} did not report table version {version}", metrics_version, 60, stack.logs("job")
    )

    job = stack.container("job")

    def healthy() -> bool:
        state = json.loads(docker("inspect", "-f", "{{json .State}}", job))
        assert state["Running"], stack.logs("job")
        return bool(state.get("Health", {}).get("Status") == "healthy")

    _wait_for("the job container did not become healthy", healthy, 120, stack.logs("job"))
    user = docker("inspect", "-f", "{{.Config.User}}", job).strip()
    assert user and user not in ("root", "0")


def test_job_image_has_its_spark_kafka_jars_without_network_or_maven() -> None:
    """The jars were resolved at build time: with no network and no Maven in the image,
    the entry point's classpath lookup still finds them."""
    require_engine()
    job_image = IMAGES.ensure_job_image(REPO, IMAGES.ensure_base_image(REPO).tag).tag
    out = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "bash",
        job_image,
        "-c",
        "command -v mvn || echo no-mvn; python -c 'from cdc_sink.kafka.jars "
        'import spark_kafka_conf as c; print(c()["spark.jars"])\'',
    )
    lines = out.split()
    assert lines[0] == "no-mvn"
    jars = lines[1].split(",")
    assert any("spark-sql-kafka-0-10_2.13" in j for j in jars), jars
    assert all(j.startswith("/opt/cdc_sink/cache/jars/") for j in jars)
