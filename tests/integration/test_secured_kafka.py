"""A secured Kafka: one client properties file serves every client, against a real broker
whose listener takes only SASL (PLAIN and SCRAM).

The test kit's broker is started with a ``SASL_PLAINTEXT`` listener (its PLAINTEXT
listener is only used here to create topics). Through the SASL listener, with the
password only in an environment variable the properties file names (``${env:…}``): the
producer SDK writes the orders stream, the streaming job (``--client-properties``) reads
it with Spark's Kafka source and writes its dead letters to a Kafka topic, the Kafka
dead-letter sink reads them back; the table equals the expected state of the stream and
the dead letters are the malformed records, once each. A wrong password is a
``KafkaAuthenticationFailed`` (producer, dead-letter sink) or the job's exit code 2 with
the broker's refusal, within seconds, never a hang.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.kafka.connection import KafkaAuthenticationFailed
from cdc_sink.kafka.deadletter import KafkaDeadLetter
from cdc_sink.kafka.producer import CdcProducer
from cdc_sink.kafka.properties import ClientProperties
from cdc_sink_testkit.kafka.broker import LocalKafka
from tests.integration.streams import orders_job_args

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "orders-svc", "s3cret pass=word"


@pytest.fixture(scope="module")
def sasl_kafka() -> Iterator[LocalKafka]:
    broker = LocalKafka(num_partitions=3, sasl_users={USER: PASSWORD, "admin": "admin-pw"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _properties(tmp_path: Path, mechanism: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.username={USER}\n"
        "sasl.password=${env:ORDERS_KAFKA_PASSWORD}\n"
    )
    return path


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_producer_and_dead_letters_through_sasl(
    sasl_kafka: LocalKafka, tmp_path: Path, mechanism: str
) -> None:
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    topic = f"orders-{mechanism.lower()}"
    sasl_kafka.create_topic(topic, 3)
    path = _properties(tmp_path, mechanism)
    props = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": PASSWORD})
    records = generate_orders(400, seed=3)
    with CdcProducer(
        sasl_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=props
    ) as producer:
        produce_records(producer, records)
    assert producer.raw.delivered == len(records)  # acknowledged by the broker

    wrong = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": "nope"})
    t0 = time.monotonic()
    with pytest.raises(KafkaAuthenticationFailed, match=rf"{mechanism} as '{USER}'") as err:
        CdcProducer(
            sasl_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=wrong
        )
    assert time.monotonic() - t0 < 15
    assert "nope" not in str(err.value)
    dlq = KafkaDeadLetter(
        sasl_kafka.sasl_bootstrap_servers, f"{topic}.dlq", client_properties=wrong, timeout=15
    )
    with pytest.raises(KafkaAuthenticationFailed, match=f"{topic}.dlq"):
        dlq.ensure_topic()


def _job(bootstrap: str, topic: str, tmp_path: Path, properties: Path) -> list[str]:
    from cdc_sink.spark.session import local_submit_command

    return [
        *local_submit_command(),
        str(REPO / "streaming_jobs" / "cdc_to_tablets.py"),
        *orders_job_args(
            bootstrap,
            topic,
            tmp_path,
            "--trigger",
            "available-now",
            "--dead-letter",
            f"kafka://{bootstrap}/{topic}.dead-letter",
            "--client-properties",
            str(properties),
        ),
    ]


def test_streaming_job_reads_and_dead_letters_through_sasl(
    sasl_kafka: LocalKafka, tmp_path: Path
) -> None:
    from cdc_sink.spark.session import local_submit_env
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    topic = "orders-job"
    sasl_kafka.create_topic(topic, 3)
    path = _properties(tmp_path, "SCRAM-SHA-256")
    props = ClientProperties.load(path, environ={"ORDERS_KAFKA_PASSWORD": PASSWORD})
    records = generate_orders(1200, seed=17)
    with CdcProducer(
        sasl_kafka.sasl_bootstrap_servers, topic, orders_schema(), client_properties=props
    ) as producer:
        produce_records(producer, records)
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)

    job = _job(sasl_kafka.sasl_bootstrap_servers, topic, tmp_path, path)
    env = {**local_submit_env(), "ORDERS_KAFKA_PASSWORD": "wrong"}
    t0 = time.monotonic()
    refused = subprocess.run(job, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    said = refused.stdout + refused.stderr  # spark-submit passes Python's stderr to stdout
    assert f"refused the connection (SASL_PLAINTEXT, SCRAM-SHA-256 as '{USER}')" in said
    assert "wrong" not in said  # the password is not echoed
    assert time.monotonic() - t0 < 120  # before the Spark session starts: no hang
    assert not (tmp_path / "orders").exists()

    env["ORDERS_KAFKA_PASSWORD"] = PASSWORD
    assert PASSWORD not in " ".join(job)  # the secret is not on the command line
    done = subprocess.run(job, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    table = cdc_sink.open_table(tmp_path / "orders")
    assert diff_rows(expected.snapshot(), table.read().to_pylist(), orders_schema()) == []
    dead = KafkaDeadLetter(
        sasl_kafka.sasl_bootstrap_servers, f"{topic}.dead-letter", client_properties=props
    ).read(deduplicate=False)
    coordinates = list(zip(dead["partition"].to_pylist(), dead["offset"].to_pylist(), strict=True))
    assert len(coordinates) == sum(r.malformed for r in records)
    assert len(set(coordinates)) == len(coordinates)  # each once
