"""A Docker engine for the container tests: find it, or install and start it.

:func:`ensure_engine` makes ``docker info`` answer, or says why it cannot:

1. an engine already answers (``$DOCKER_HOST`` or the default socket): nothing to do;
2. ``dockerd`` is installed and this process is root: it is started in the background
   (its own session, logging to :func:`dockerd_log_path`) and left running for later
   runs, as a system service would be;
3. ``dockerd`` is missing, this process is root and ``apt-get`` exists: Debian's
   ``docker.io``, ``docker-compose`` (1.29) and ``debootstrap`` packages are installed
   first (the images are built from a local base made with debootstrap, because no
   image registry may be reachable).

Anything else raises :class:`DockerUnavailable` with the reason, which tests use as
their skip reason. Containers are run with host networking only (see ``docker/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from cdc_sink.errors import CdcSinkError

__all__ = [
    "APT_PACKAGES",
    "DockerUnavailable",
    "compose_command",
    "dockerd_log_path",
    "engine_running",
    "ensure_engine",
]

APT_PACKAGES = ("docker.io", "docker-compose", "debootstrap")
_APT_TIMEOUT_S = 1200.0


class DockerUnavailable(CdcSinkError, RuntimeError):
    """No Docker engine answers and none can be started here (the message says why)."""


def dockerd_log_path() -> Path:
    """Where a ``dockerd`` started by :func:`ensure_engine` logs."""
    return Path(tempfile.gettempdir()) / "cdc_sink-dockerd.log"


def engine_running(timeout: float = 15.0) -> bool:
    """True when a Docker engine answers ``docker info`` (a client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(
                ["docker", "info"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_command() -> list[str] | None:
    """The compose CLI: ``docker-compose`` (Debian's 1.29), else ``docker compose``."""
    found = shutil.which("docker-compose")
    if found:
        return [found]
    if shutil.which("docker") is not None:
        probe = subprocess.run(
            ["docker", "compose", "version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _missing_packages() -> list[str]:
    wanted = {
        "docker.io": "dockerd",
        "docker-compose": "docker-compose",
        "debootstrap": "debootstrap",
    }
    return [
        pkg
        for pkg, exe in wanted.items()
        if shutil.which(exe) is None and not Path("/usr/sbin", exe).is_file()
    ]


def _install_packages(packages: list[str]) -> None:
    if shutil.which("apt-get") is None:
        raise DockerUnavailable(
            f"{', '.join(packages)} not installed and there is no apt-get to install them"
        )
    if not _is_root():
        raise DockerUnavailable(
            f"{', '.join(packages)} not installed, and installing them with apt-get needs root"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        try:
            proc = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=env,
                timeout=_APT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise DockerUnavailable(f"{' '.join(cmd)} timed out") from exc
        if proc.returncode != 0:
            raise DockerUnavailable(
                f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}"
            )


def _start_dockerd(timeout: float) -> None:
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not Path(dockerd).is_file():
        raise DockerUnavailable("dockerd is not installed")
    if not _is_root():
        raise DockerUnavailable("no Docker engine answers and starting dockerd needs root")
    log_path = dockerd_log_path()
    with open(log_path, "ab") as log:
        # Its own session: the engine outlives this process, as a service would.
        proc = subprocess.Popen(
            [dockerd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not engine_running(timeout=5.0):
        if proc.poll() is not None:
            raise DockerUnavailable(
                f"dockerd exited with code {proc.returncode} while starting:\n{_tail(log_path)}"
            )
        if time.monotonic() > deadline:
            raise DockerUnavailable(
                f"dockerd did not answer within {timeout:.0f}s:\n{_tail(log_path)}"
            )
        time.sleep(0.5)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def ensure_engine(*, install: bool = True, timeout: float = 90.0) -> None:
    """Make a Docker engine answer: use a running one, or start (and install) ``dockerd``.

    Args:
        install: Install Debian's ``docker.io``/``docker-compose``/``debootstrap`` with
            apt-get when missing (root only).
        timeout: Seconds to wait for a started ``dockerd`` to answer.

    Raises:
        DockerUnavailable: No engine answers and none could be started; the message
            says why (no root, no apt-get, dockerd failed with its log's tail, ...).
    """
    if engine_running():
        if install:
            missing = [p for p in _missing_packages() if p != "docker.io"]
            if missing:
                _install_packages(missing)
        return
    if os.environ.get("DOCKER_HOST"):
        raise DockerUnavailable(
            f"the Docker engine at $DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer"
        )
    missing = _missing_packages()
    if missing:
        if not install:
            raise DockerUnavailable(f"not installed: {', '.join(missing)}")
        _install_packages(missing)
    _start_dockerd(timeout)
