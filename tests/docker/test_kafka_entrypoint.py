"""docker/kafka/entrypoint.sh and healthcheck.sh, run with bash (no Docker, no Kafka: a
stand-in ``java`` records its arguments). The broker binds 127.0.0.1 unless told
otherwise; a wildcard bind needs the advertised host; a PLAINTEXT listener other hosts
can reach starts with a warning; explicit ``KAFKA_LISTENERS`` (how compose and the tests
run the image) win; the health check reaches a broker bound to every interface."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

KAFKA_DIR = Path(__file__).resolve().parents[2] / "docker" / "kafka"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@dataclass
class Run:
    code: int
    stderr: str
    props: dict[str, str]
    java_ran: bool


@pytest.fixture
def entrypoint(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    """Runs the entry point with ``env`` (and nothing else of this process's
    environment but PATH), a ``java`` that only records that it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "java-ran"
    java = bin_dir / "java"
    java.write_text(f'#!/usr/bin/env bash\necho "$@" >> {marker}\n')
    java.chmod(0o755)

    def run(**env: str) -> Run:
        conf = tmp_path / "conf"
        shutil.rmtree(conf, ignore_errors=True)
        marker.unlink(missing_ok=True)
        proc = subprocess.run(
            ["bash", str(KAFKA_DIR / "entrypoint.sh")],
            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "KAFKA_CONF_DIR": str(conf), **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        props_file = conf / "server.properties"
        props = {}
        if props_file.is_file():
            for line in props_file.read_text().splitlines():
                key, _, value = line.partition("=")
                props[key] = value
        return Run(proc.returncode, proc.stderr, props, marker.is_file())

    yield run


def test_by_default_the_broker_binds_loopback_only(entrypoint: Callable[..., Run]) -> None:
    run = entrypoint()
    assert run.code == 0, run.stderr
    assert run.props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert run.props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert run.props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert "warning" not in run.stderr and run.java_ran


def test_a_wildcard_bind_needs_the_advertised_host(entrypoint: Callable[..., Run]) -> None:
    run = entrypoint(KAFKA_BIND_ADDRESS="0.0.0.0")
    assert run.code != 0
    assert "KAFKA_ADVERTISED_HOST" in run.stderr
    assert not run.java_ran


def test_an_open_plaintext_listener_starts_with_a_warning(entrypoint: Callable[..., Run]) -> None:
    run = entrypoint(KAFKA_BIND_ADDRESS="0.0.0.0", KAFKA_ADVERTISED_HOST="kafka.example")
    assert run.code == 0, run.stderr
    assert run.props["listeners"] == "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093"
    assert run.props["advertised.listeners"] == "PLAINTEXT://kafka.example:9092"
    assert "warning: listener PLAINTEXT://0.0.0.0:9092" in run.stderr
    assert "CONTROLLER" not in run.stderr  # loopback: no warning
    assert not {"bind.address", "advertised.host"} & set(run.props)  # not properties


@pytest.mark.parametrize(
    ("listeners", "warned"),
    [
        ("PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093", False),  # compose, tests
        ("PLAINTEXT://:9092,CONTROLLER://:9093", True),  # the old default: every interface
        ("SASL_SSL://0.0.0.0:9094,CONTROLLER://127.0.0.1:9093", False),
    ],
)
def test_explicit_listeners_win(
    entrypoint: Callable[..., Run], listeners: str, warned: bool
) -> None:
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
    run = entrypoint(
        KAFKA_LISTENERS=listeners,
        KAFKA_ADVERTISED_LISTENERS=listeners.split(",")[0],
        KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=protocols,
    )
    assert run.code == 0, run.stderr
    assert run.props["listeners"] == listeners
    assert ("warning" in run.stderr) is warned


@pytest.fixture
def listening() -> Iterator[int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "127.0.0.1"])
def test_the_health_check_reaches_the_first_listener(
    tmp_path: Path, listening: int, host: str
) -> None:
    (tmp_path / "server.properties").write_text(
        f"listeners=PLAINTEXT://{host}:{listening},CONTROLLER://127.0.0.1:1\n"
    )
    proc = subprocess.run(
        ["bash", str(KAFKA_DIR / "healthcheck.sh")],
        env={"PATH": "/usr/bin:/bin", "KAFKA_CONF_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
