"""Free ports and readiness probes for the brokers this kit starts.

:class:`~cdc_sink_testkit.kafka.broker.LocalKafka` and
:class:`~cdc_sink_testkit.kafka.container.TestcontainersKafka` pick two free ports (the
broker's and its controller's), poll the client port, then ask the cluster for its
brokers until one answers.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["broker_answers", "free_port", "free_port_pair", "port_open"]


def broker_answers(admin: Any) -> bool:
    """True when the cluster behind ``admin`` lists at least one broker within 2 s.

    Raises:
        Exception: The client's error while the broker is still starting.
    """
    return bool(admin.list_topics(timeout=2.0).brokers)


def free_port(host: str) -> int:
    """A TCP port nothing listens on right now (it may be taken before it is bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port_pair(host: str) -> tuple[int, int]:
    """Two different free ports (a broker's and its controller's)."""
    first = free_port(host)
    second = free_port(host)
    while second == first:
        second = free_port(host)
    return first, second


def port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
