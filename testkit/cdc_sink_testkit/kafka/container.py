"""A KRaft Kafka broker in a Docker container (testcontainers, host network).

:class:`TestcontainersKafka` runs the project's Kafka image (``docker/kafka/``, built by
``docker/images.py``) or any image configured like ``apache/kafka``, with the
node configuration of :func:`cdc_sink_testkit.kafka.kraft.container_env`.
:func:`docker_available` and :func:`docker_kafka_image` tell whether it can run here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
import time
from typing import Any

from cdc_sink.kafka.admin import admin_client
from cdc_sink_testkit.checkout import docker_images, repo_root
from cdc_sink_testkit.kafka.handle import (
    KafkaHandle,
    KafkaStartError,
    register_live,
    unregister_live,
)
from cdc_sink_testkit.kafka.kraft import container_env
from cdc_sink_testkit.kafka.probes import broker_answers, free_port_pair, port_open
from cdc_sink_testkit.process import WAIT_FOR_PARENT, start_watchdog

logger = logging.getLogger(__name__)

__all__ = ["IMAGE_ENV", "TestcontainersKafka", "docker_available", "docker_kafka_image"]

IMAGE_ENV = "CDC_SINK_KAFKA_IMAGE"  # the image TestcontainersKafka runs


class TestcontainersKafka(KafkaHandle):
    """A KRaft broker in a Docker container, run with testcontainers on the host network.

    The image is the project's own (``docker/kafka/Dockerfile``, built once per machine by
    ``ensure_kafka_image`` of ``docker/images.py`` from the Maven Central jars of
    ``testkit/cdc_sink_testkit/kafka/pom.xml``; no registry needed), or
    ``$CDC_SINK_KAFKA_IMAGE``, or the ``image`` argument: any image configured like
    ``apache/kafka`` (``KAFKA_*`` variables, ``CLUSTER_ID``). The container uses host
    networking and listens on 127.0.0.1 only, on free ports. Testcontainers' Ryuk reaper
    is not used when its image is not present locally; instead, as for
    :class:`LocalKafka`, ``stop()``, an ``atexit`` handler and a watchdog process (for a
    killed Python) remove the container.

    Args:
        num_partitions: ``num.partitions``, the default for new topics.
        image: The image; default as described above.
        startup_timeout: Seconds ``start()`` waits for the broker to answer.
    """

    __test__ = False  # not a pytest test class despite its name

    def __init__(
        self, *, num_partitions: int = 1, image: str | None = None, startup_timeout: float = 120.0
    ) -> None:
        self._init_broker(num_partitions, startup_timeout)
        self.image = image
        self.port: int | None = None
        self.controller_port: int | None = None
        self._container: Any = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None or self._container is None:
            raise RuntimeError("TestcontainersKafka is not running: call start() first")
        return f"{self.host}:{self.port}"

    @property
    def container_id(self) -> str | None:
        """The running container's id (None before ``start()`` or after ``stop()``)."""
        if self._container is None:
            return None
        return str(self._container.get_wrapped_container().id)

    def start(self) -> TestcontainersKafka:
        """Build the image if needed, run the container and wait until Kafka answers."""
        with self._lock:
            if self._container is not None:
                return self
            image = self.image or docker_kafka_image(build=True)
            assert image is not None
            self.image = image
            try:
                self._launch(image)
                self._wait_ready()
            except BaseException:
                self._teardown()
                raise
            logger.info("Kafka container (%s) up at %s", image, self.bootstrap_servers)
            return self

    def stop(self) -> None:
        """Remove the container (and its anonymous volume); idempotent."""
        with self._lock:
            self._teardown()

    def __enter__(self) -> TestcontainersKafka:
        return self.start()

    def _launch(self, image: str) -> None:
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer

        if not testcontainers_config.ryuk_disabled and not _image_exists(
            testcontainers_config.ryuk_image
        ):
            testcontainers_config.ryuk_disabled = True  # it could not be pulled
        self.port, self.controller_port = free_port_pair(self.host)
        env = container_env(
            host=self.host,
            port=self.port,
            controller_port=self.controller_port,
            num_partitions=self.num_partitions,
        )
        container = DockerContainer(image).with_kwargs(network_mode="host")
        for key, value in env.items():
            container = container.with_env(key, value)
        container.start()
        self._container = container
        register_live(self)
        # Removes the container should this process die without stop() (see LocalKafka).
        self._watchdog = start_watchdog(_CONTAINER_WATCHDOG, self.container_id or "")

    def _logs_tail(self, lines: int = 60) -> str:
        try:
            out, err = self._container.get_logs()
            text = (out + err).decode(errors="replace")
        except Exception as exc:  # the container may be gone
            return f"(no logs: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        assert self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        admin: Any = None
        while True:
            wrapped = self._container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise KafkaStartError(
                    f"the Kafka container exited while starting:\n{self._logs_tail()}"
                )
            if port_open(self.host, self.port):
                if admin is None:
                    admin = admin_client(
                        self.bootstrap_servers, **{"socket.connection.setup.timeout.ms": 2000}
                    )
                with contextlib.suppress(Exception):  # KafkaException while still starting
                    if broker_answers(admin):
                        return
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"the Kafka container did not answer within "
                    f"{self.startup_timeout}s:\n{self._logs_tail()}"
                )
            time.sleep(0.2)

    def _teardown(self) -> None:
        container, watchdog = self._container, self._watchdog
        self._container, self._watchdog = None, None
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop()  # removes it (force) with its anonymous volumes
        if watchdog is not None:
            if watchdog.stdin is not None:
                with contextlib.suppress(OSError):
                    watchdog.stdin.close()  # EOF: it removes the (gone) container and exits
            with contextlib.suppress(Exception):
                watchdog.wait(timeout=30)
        unregister_live(self)


# Waits for EOF on stdin (the parent stopped it or died), then force-removes the container.
_CONTAINER_WATCHDOG = (
    WAIT_FOR_PARENT
    + """
import subprocess
if sys.argv[1]:
    subprocess.run(["docker", "rm", "-f", "-v", sys.argv[1]], capture_output=True, timeout=60)
"""
)


def docker_available(timeout: float = 10.0) -> bool:
    """True when a Docker engine answers ``docker info`` (a client alone is not enough)."""
    from cdc_sink_testkit.docker_engine import engine_running

    return engine_running(timeout=timeout)


def docker_kafka_image(*, build: bool) -> str | None:
    """The Kafka image for :class:`TestcontainersKafka`.

    ``$CDC_SINK_KAFKA_IMAGE`` when set; else the project's image
    (``docker/kafka/Dockerfile`` of this checkout), built (with the local base) when
    ``build`` and missing. None when there is none and ``build`` is false.

    Raises:
        KafkaStartError: No image is named and this checkout has no ``docker/``.
    """
    named = os.environ.get(IMAGE_ENV)
    if named:
        return named
    root = repo_root()
    if root is None:
        if not build:
            return None
        raise KafkaStartError(
            f"no Kafka image: set ${IMAGE_ENV} (e.g. apache/kafka) or run "
            "from a checkout that has docker/kafka/Dockerfile"
        )
    images = docker_images()
    if not build:
        tag: str | None = images.kafka_image_tag(root)
        return tag if tag is not None and _image_exists(tag) else None
    return str(images.ensure_kafka_image(root).tag)


def _image_exists(tag: str) -> bool:
    """True when ``docker image inspect tag`` finds the image."""
    return bool(docker_images().image_exists(tag))
