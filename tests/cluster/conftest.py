"""Fixtures of the cluster tests: a Spark standalone cluster of a master and two workers
(:class:`~cdc_sink_testkit.cluster.StandaloneCluster`) started once per module, and a
Kafka broker (the local Maven-jar broker, or the cluster ``$CDC_SINK_KAFKA_BOOTSTRAP``
names) started once per session; both stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdc_sink_testkit.cluster import StandaloneCluster
from cdc_sink_testkit.kafka import KafkaHandle, start_own_kafka
from cdc_sink_testkit.s3 import SeaweedS3


@pytest.fixture(scope="module")
def cluster(s3_server: SeaweedS3) -> Iterator[StandaloneCluster]:
    """Two workers of one core each (512 MiB executors), whose environment holds the
    session S3 server's keys (``AWS_*``, where obstore reads them in the executors)."""
    keys = s3_server.storage_options()
    env = {
        "AWS_ACCESS_KEY_ID": keys["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": keys["secret_access_key"],
    }
    with StandaloneCluster(workers=2, cores=1, memory="1g", executor_memory="512m", env=env) as c:
        yield c


@pytest.fixture(scope="session")
def cluster_kafka() -> Iterator[KafkaHandle]:
    """A running Kafka cluster for the cluster tests."""
    with start_own_kafka() as handle:
        yield handle
