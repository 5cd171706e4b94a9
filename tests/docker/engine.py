"""What the Docker tests share: the repository root, the engine, free ports, ``docker``,
and the image builder ``docker/images.py`` (:data:`IMAGES`, loaded through the test kit)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cdc_sink_testkit.checkout import docker_images
from cdc_sink_testkit.docker_engine import DockerUnavailable, compose_command, ensure_engine

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
#: ``docker/images.py`` of this checkout (run as ``python docker/images.py``).
IMAGES = docker_images()


def require_engine() -> list[str]:
    """Start (installing if needed) a Docker engine and return the compose command; skip
    the test, saying why, where no engine can be started at all."""
    try:
        ensure_engine()
    except DockerUnavailable as exc:
        pytest.skip(f"no Docker engine can be started on this machine: {exc}")
    compose = compose_command()
    if compose is None:
        pytest.skip(
            "a Docker engine runs but neither docker-compose nor 'docker compose' is installed"
        )
    return compose


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def docker(*args: str, timeout: float = 120.0, check: bool = True) -> str:
    """Runs ``docker args...``; returns its stdout (raises with its output on failure)."""
    proc = IMAGES.run_docker(*args, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"docker {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return proc.stdout
