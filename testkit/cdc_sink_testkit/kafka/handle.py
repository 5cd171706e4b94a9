"""What every kind of Kafka cluster offers (:class:`KafkaHandle`), and the registry that
stops the brokers this process started when it exits.

:mod:`cdc_sink_testkit.kafka.broker` (a local KRaft JVM), :mod:`cdc_sink_testkit.kafka.container` (a
Docker container) and :class:`ExternalKafka` (a cluster that runs elsewhere) implement it.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Mapping
from types import TracebackType

from cdc_sink.errors import CdcSinkError, InvalidOption
from cdc_sink.kafka.admin import create_topic

__all__ = ["ExternalKafka", "KafkaHandle", "KafkaStartError", "register_live", "unregister_live"]


class KafkaStartError(CdcSinkError, RuntimeError):
    """A Kafka broker could not be started (the message ends with its log's tail)."""


class KafkaHandle:
    """A running Kafka cluster: where it is, how to stop it, how to make topics."""

    @property
    def bootstrap_servers(self) -> str:
        """``host:port[,host:port...]`` of the cluster."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop what this handle started (idempotent; a no-op for an external cluster)."""

    def _init_broker(self, num_partitions: int, startup_timeout: float) -> None:
        """What a broker this process starts checks and records first.

        Raises:
            InvalidOption: ``num_partitions`` is below 1.
        """
        if num_partitions < 1:
            raise InvalidOption("num_partitions must be >= 1", option="num_partitions")
        self.host = "127.0.0.1"
        self.num_partitions = num_partitions
        self.startup_timeout = startup_timeout

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create ``name`` and wait until every partition has a leader."""
        create_topic(
            self.bootstrap_servers,
            name,
            partitions,
            replication_factor=replication_factor,
            config=config,
            timeout=timeout,
        )

    def __enter__(self) -> KafkaHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ExternalKafka(KafkaHandle):
    """A cluster that runs elsewhere: nothing to start or stop."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._bootstrap = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        """The servers given to the constructor."""
        return self._bootstrap


# Live brokers (local processes and containers) of this process, stopped at interpreter
# exit. Strong references: a broker that was started stays alive (and reachable for this
# handler) until it is stopped.
_LIVE: set[KafkaHandle] = set()


def register_live(handle: KafkaHandle) -> None:
    """Stops ``handle`` at interpreter exit unless :func:`unregister_live` is called first."""
    _LIVE.add(handle)


def unregister_live(handle: KafkaHandle) -> None:
    """``handle`` was stopped: nothing to do for it at exit."""
    _LIVE.discard(handle)


@atexit.register
def _stop_all_at_exit() -> None:
    for broker in list(_LIVE):
        with contextlib.suppress(Exception):
            broker.stop()
