"""Kafka administration: an admin client and topic creation.

Used by the Kafka dead-letter sink (:mod:`cdc_sink.kafka.deadletter_kafka`) to create its
topic, and by anyone setting up a cluster for the sink. The calls use confluent-kafka's
``AdminClient`` (the ``kafka`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cdc_sink.errors import CdcSinkError
from cdc_sink.kafka._clients import confluent_client
from cdc_sink.utils.extras import require

__all__ = ["admin_client", "create_topic"]


def admin_client(bootstrap_servers: str, **config: Any) -> Any:
    """A confluent-kafka ``AdminClient`` for ``bootstrap_servers``.

    Raises:
        MissingExtra: confluent-kafka is not installed (the ``kafka`` extra).
        InvalidOption: A setting librdkafka refuses (named, not its value).
    """
    require("confluent_kafka", feature="Kafka administration (topics, brokers)")
    return confluent_client("admin", {"bootstrap.servers": bootstrap_servers, **config})


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    *,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    client_config: Mapping[str, Any] | None = None,
) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait for its leaders.

    ``config`` is the topic's configuration; ``client_config`` the admin client's (the
    cluster's security settings: librdkafka names).

    Raises:
        CdcSinkError: The topic could not be created, or has no leader in time.
        MissingExtra: confluent-kafka is not installed (the ``kafka`` extra).
    """
    admin = admin_client(bootstrap_servers, **dict(client_config or {}))
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported

    topic = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=dict(config or {}),
    )
    futures = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as exc:
        raise CdcSinkError(f"cannot create topic {name!r}: {exc}") from exc
    _wait_for_leaders(admin, name, partitions, timeout)


def _wait_for_leaders(admin: Any, name: str, partitions: int, timeout: float) -> None:
    """Polls the metadata until every partition of ``name`` has a leader."""
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic=name, timeout=max(1.0, deadline - time.monotonic()))
        t = md.topics.get(name)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise CdcSinkError(f"topic {name!r} has no leader for every partition after {timeout}s")
        time.sleep(0.05)
